"""The app context the API's views read: `web.context.AppContext`, shared with the
dashboard (``app.extensions["sweepstack"]``, set by `cli.app.create_app`)."""

from __future__ import annotations

from web.context import AppContext, context

#: The API's historical name for the shared context.
ApiContext = AppContext

__all__ = ["ApiContext", "AppContext", "context"]
