"""Every wire format and socket, sans-IO codecs first: stream and sample codecs, recording format, auth, channels, control socket, Prometheus names, kineto/."""
