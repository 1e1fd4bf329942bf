#!/usr/bin/env bash
# Regenerates the kubelet PodResources v1 stubs (collectors/kubelet/proto/api_pb2*.py*) from the
# vendored api.proto. The generated files are committed: installing gpulens needs grpcio and protobuf
# (the [k8s] extra) only, never grpcio-tools. Needs: .venv/bin/pip install grpcio-tools.
# The .proto is compiled under its installed name (gpulens/collectors/kubelet/proto/api.proto), so the
# stubs import each other as gpulens.collectors.kubelet.proto.* and register a file name no other
# package's "api.proto" collides with in protobuf's global descriptor pool. Raise the floors of
# grpcio and protobuf in pyproject.toml to the versions the new stubs check for (GRPC_GENERATED_VERSION
# in api_pb2_grpc.py; ValidateProtobufRuntimeVersion in api_pb2.py).
set -euo pipefail
cd "$(dirname "$0")/.."
src=collectors/kubelet/proto
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/in/gpulens/collectors/kubelet/proto" "$tmp/out"
cp "$src/api.proto" "$tmp/in/gpulens/collectors/kubelet/proto/api.proto"
"${PYTHON:-.venv/bin/python}" -m grpc_tools.protoc -I "$tmp/in" \
    --python_out="$tmp/out" --pyi_out="$tmp/out" --grpc_python_out="$tmp/out" \
    gpulens/collectors/kubelet/proto/api.proto
cp "$tmp/out/gpulens/collectors/kubelet/proto/"api_pb2.py "$tmp/out/gpulens/collectors/kubelet/proto/"api_pb2.pyi \
   "$tmp/out/gpulens/collectors/kubelet/proto/"api_pb2_grpc.py "$src/"
echo "regenerated $src/api_pb2.py, api_pb2.pyi, api_pb2_grpc.py"
