"""File bytes in an S3-compatible object store (AWS S3, MinIO, Cloudflare R2, GCS interop).

    blobs = S3BlobStore(bucket="routegate-files", prefix="prod/", endpoint_url=None)
    blobs.put("file-ab12...", upload_fileobj)       # multipart above 8 MiB (boto3's transfer)
    blobs.read_range("file-ab12...", 120, 88)         # one ranged GET

Through boto3, the well-kept client: its transfer manager uploads large
files in parts, and its credential chain (environment, shared config,
instance roles) applies. The calls are synchronous, as ``BlobStore``'s are:
callers run them in a thread. For large files and long retention; the
quota and expiry are still the file store's (an operator may add a bucket
lifecycle rule as a backstop, longer than ``batch.file_expiry_s``).

Tested against moto's S3 server (``moto_server``), since no real S3 server
installs here (``tests/batch/test_blob_stores.py``).
"""

from __future__ import annotations

from typing import Any, BinaryIO

from batch.blobs import BlobMissing, check_key

CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 30.0
ATTEMPTS = 3


class S3BlobStore:
    def __init__(self, bucket: str, *, prefix: str = "", endpoint_url: str | None = None,
                 region: str | None = None, replica: str = "", client: Any = None) -> None:
        if client is None:
            import boto3  # optional: only a gateway configured for s3 needs it
            from botocore.config import Config

            client = boto3.client(
                "s3", endpoint_url=endpoint_url, region_name=region,
                config=Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                              retries={"max_attempts": ATTEMPTS, "mode": "standard"}))
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.replica = replica

    def describe(self) -> str:
        return f"the s3 blob store s3://{self.bucket}/{self.prefix}"

    def _name(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _missing(self, key: str) -> BlobMissing:
        return BlobMissing(key, self.describe(), self.replica)

    def put(self, key: str, src: BinaryIO) -> int:
        start = src.tell()
        size = src.seek(0, 2) - start
        src.seek(start)
        self.client.upload_fileobj(src, self.bucket, self._name(key))
        return size

    def put_bytes(self, key: str, data: bytes) -> int:
        self.client.put_object(Bucket=self.bucket, Key=self._name(key), Body=data)
        return len(data)

    def _get(self, key: str, **extra: Any) -> Any:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._name(key), **extra)
        except self.client.exceptions.NoSuchKey:
            raise self._missing(key) from None

    def open(self, key: str) -> BinaryIO:
        body = self._get(key)["Body"]   # botocore's StreamingBody: read(n), close()
        return body  # type: ignore[no-any-return]

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        from botocore.exceptions import ClientError

        try:
            data = self._get(key, Range=f"bytes={offset}-{offset + length - 1}")["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":  # past the end
                return b""
            raise
        return data  # type: ignore[no-any-return]

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._name(key))
