"""The REST server (``personamem serve``; the ``server`` extra): JSON routes with tenants and API keys."""

from personamem.errors import MissingExtraError

try:
    from personamem.server.app import app_from_env, create_app
except ImportError as exc:  # fastapi, uvicorn or prometheus_client missing
    raise MissingExtraError(["fastapi", "uvicorn", "prometheus-client"], "server") from exc

__all__ = ["app_from_env", "create_app"]
