"""Reading a cluster from Prometheus: HTTP client, answer assembly into samples, and the source."""
