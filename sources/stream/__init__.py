"""The viewer side of the agent stream: one client link, downloads, and the local control-socket client."""
