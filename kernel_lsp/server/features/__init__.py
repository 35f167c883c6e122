"""One module per feature; each exposes `register(server)`, which adds its handlers and subscribes to the
server's events. The order is the registration order. `server/main.py` puts the server and its features together:
the server imports none of them."""

from . import (
    accept,
    actions,
    commands,
    configuration,
    diagnostics,
    hover,
    lenses,
    prepare,
    progress,
    sync,
    watch,
)

FEATURES = (configuration, sync, diagnostics, progress, commands, lenses, actions, hover, accept, watch, prepare)

__all__ = ["FEATURES"]
