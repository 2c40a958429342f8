"""The error every executor raises when it cannot run as asked, in a module of its own:
the CLI catches it without importing the executors (Ray's is heavy), and the Ray executor
raises it without importing the choice between executors."""

from __future__ import annotations


class ExecutorRefused(Exception):
    """The executor cannot run as asked (no Ray installed, no cluster at the address, a
    cluster that refuses this workspace's token); the message says what to do."""
