"""An S3-compatible server on 127.0.0.1 for tests: moto's server mode, in a thread of the test process."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

ACCESS_KEY_ID = "AKIA" + "STYRMINTEST0001"
"""Fixed so tests can search every output for it; moto accepts any key."""


@dataclass(frozen=True)
class S3Server:
    """A running moto server, a bucket in it, and credentials that reach it."""

    endpoint_url: str
    bucket: str
    access_key_id: str
    secret_access_key: str

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
        )

    def object_keys(self, prefix: str = "") -> list[str]:
        """The object keys in the bucket under ``prefix``."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(str(item["Key"]) for page in pages for item in page.get("Contents", []))


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """Start moto's S3 server on a free port of 127.0.0.1 with an empty bucket; stop it after."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        # A secret access key unlike any other string, so a test can search every output for it.
        found = S3Server(
            f"http://{host}:{port}", "styrmin-backups", ACCESS_KEY_ID, "sk-" + secrets.token_hex(16)
        )
        found.client().create_bucket(Bucket=found.bucket)
        yield found
    finally:
        server.stop()
