"""The Kineto on-demand protocol: datagram codec, endpoint, registry, dynolog RPC, trace requests, service, diagnose."""
