"""End-to-end tests: the real gpulens driven in a real tmux."""
