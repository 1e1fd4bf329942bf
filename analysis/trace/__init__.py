"""PyTorch trace analysis: load, analyze (key_averages), GPU split, timeline, findings, export."""
