"""The environment variables the SDK reads (apart, so that importing them costs nothing)."""

URL_ENV = "STYRMIN_URL"
TOKEN_ENV = "STYRMIN_TOKEN"  # noqa: S105 - the name of a variable, not a secret
