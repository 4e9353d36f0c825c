#!/usr/bin/env bash
# Prepare this machine for knowlyr-sandbox's integration tests (Docker daemon, bubblewrap, the
# base image). The logic ships inside the package (python -m agentsandbox.setup_docker); this
# wrapper runs that one copy straight from the checkout, before any virtualenv exists.
exec bash "$(dirname "$0")/../packages/sandbox/src/agentsandbox/setup_docker.sh" "$@"
