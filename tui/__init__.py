"""The Textual user interface: app, screens and widgets. Reads the store and sends requests through the source."""
