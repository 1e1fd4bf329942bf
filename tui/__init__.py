"""The Textual user interface. Reads the store; never reads /proc or NVML itself."""
