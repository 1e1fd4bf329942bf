"""The viewer side of the agent stream: one client link, its request table and downloads, transports."""
