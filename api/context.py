"""The app context the API's views read: `core.webcontext.AppContext`, shared with the
dashboard (``app.extensions["sweepstack"]``, set by `web.app.create_app`)."""

from __future__ import annotations

from core.webcontext import AppContext, context

#: The API's historical name for the shared context.
ApiContext = AppContext

__all__ = ["ApiContext", "AppContext", "context"]
