"""What the viewer reads: local, replay, demo and multi sources; stream/ (agents), prometheus/, and tracing through an agent."""
