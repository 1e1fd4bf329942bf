"""The viewer's store: bounded rings per host, GPU and job, window statistics and read-only views."""
