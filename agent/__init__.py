"""The gpulens agent: sampling loop, viewer sessions, request runner and the /metrics exporter."""
