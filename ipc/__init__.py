"""IPC: the Kineto on-demand endpoint and the agent stream codec. Never imports textual."""
