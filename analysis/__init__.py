"""Analysis shared by agent and viewer: flame graphs (flame/) and PyTorch trace analysis (trace/)."""
