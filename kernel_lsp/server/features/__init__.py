"""One module per feature; each exposes `register(server)`. The order is the registration order."""

from . import (
    accept,
    actions,
    commands,
    configuration,
    diagnostics,
    hover,
    lenses,
    progress,
    sync,
    watch,
)

FEATURES = (configuration, sync, diagnostics, progress, commands, lenses, actions, hover, accept, watch)

__all__ = ["FEATURES"]
