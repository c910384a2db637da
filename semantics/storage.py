"""Where a source's Delta table lives, a local folder or an S3 bucket, and how its files are read.

An ``s3://`` (or ``s3a://``) table is read through deltalake's own object store, with the
source's ``storage_options``: the non-secret options of delta-rs' S3 store (endpoint, region,
plain HTTP for a local S3-compatible server, ...). Credentials come from the environment only
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ...), never from a spec, and
they must be there before anything is read: without them delta-rs would ask the cloud's
instance metadata service, which is not where a backtest's credentials come from.

>>> check_storage_options({"aws_endpoint_url": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": True,
...                        "MAX_RETRIES": 5})
{'AWS_ENDPOINT_URL': 'http://127.0.0.1:9000', 'AWS_ALLOW_HTTP': 'true', 'max_retries': '5'}
>>> check_storage_options({"AWS_SECRET_ACCESS_KEY": "x"})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: AWS_SECRET_ACCESS_KEY is a credential: credentials come from the environment ...
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from semantics.errors import DataError

REMOTE_SCHEMES = ("s3", "s3a")
# delta-rs' S3 options a spec may set: where the store is and how to talk to it, nothing secret
SPEC_OPTIONS = (
    "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ALLOW_HTTP", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
    "AWS_SKIP_SIGNATURE", "AWS_REQUEST_PAYER", "TIMEOUT", "CONNECT_TIMEOUT", "MAX_RETRIES",
    "RETRY_TIMEOUT",
)
_SECRET = re.compile(r"SECRET|TOKEN|PASSWORD|ACCESS_KEY|SESSION|CREDENTIAL")
ENV_CREDENTIALS_TEXT = ("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, "
                        "AWS_PROFILE, ...")
# object_store retries a failing request for up to 3 minutes by default: a wrong endpoint
# would look like a hang. A spec may set its own (MAX_RETRIES, RETRY_TIMEOUT). delta-rs reads
# these client options in lower case only (AWS_* in either).
DEFAULT_OPTIONS = {"max_retries": "3", "retry_timeout": "30s"}


def scheme(table: str) -> str | None:
    """The URI scheme of a spec's ``table`` (lower case), or None for a plain path."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]+)://", table)
    return m.group(1).lower() if m else None


def is_remote(table: str) -> bool:
    return scheme(table) in REMOTE_SCHEMES


def check_storage_options(options: Mapping[str, object]) -> dict[str, str]:
    """A spec's ``storage_options`` as delta-rs takes them (upper-case keys, string values);
    ``ValueError`` for a credential or an option a spec may not set."""
    out: dict[str, str] = {}
    for key, value in options.items():
        k = str(key).upper()
        if k == "AWS_ENDPOINT":
            k = "AWS_ENDPOINT_URL"
        if _SECRET.search(k):
            raise ValueError(f"{key} is a credential: credentials come from the environment "
                             f"({ENV_CREDENTIALS_TEXT}), never from a spec")
        if k not in SPEC_OPTIONS:
            raise ValueError(f"{key} is not an option a spec may set; expected one of: "
                             + ", ".join(SPEC_OPTIONS))
        if not isinstance(value, str | bool | int | float) or isinstance(value, str) and not value:
            raise ValueError(f"{key}: a non-empty string, number or boolean")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if k == "AWS_ENDPOINT_URL":
            url = urlparse(text)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError(f"{key}: an http:// or https:// URL, got {text!r}")
            if url.username or url.password:
                raise ValueError(f"{key}: a URL without user or password (credentials come "
                                 f"from the environment: {ENV_CREDENTIALS_TEXT})")
        out[k if k.startswith("AWS_") else k.lower()] = text
    return out


def env_has_credentials(options: Mapping[str, str]) -> bool:
    """Are there credentials the object store reads from the environment (or none needed)?"""
    env = os.environ
    return (options.get("AWS_SKIP_SIGNATURE", "").lower() == "true"
            or env.get("AWS_SKIP_SIGNATURE", "").lower() == "true"
            or bool(env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"))
            or any(env.get(k) for k in ("AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                                        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                                        "AWS_CONTAINER_CREDENTIALS_FULL_URI")))


@dataclass(frozen=True)
class TableLocation:
    """A source's table: ``uri`` is a local path or an ``s3://`` URI; ``where`` names it in
    errors; ``field`` is the spec field that chose it (``sources.<name>.table``)."""

    uri: str
    field: str
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def remote(self) -> bool:
        return is_remote(self.uri)

    @property
    def where(self) -> str:
        return self.uri

    @cached_property
    def _fs(self) -> pafs.FileSystem:
        """A pyarrow filesystem rooted at the table, through deltalake's object store (the
        same options and credentials as ``DeltaTable``)."""
        from deltalake.fs import DeltaStorageHandler

        return pafs.PyFileSystem(DeltaStorageHandler(self.uri, self.delta_options()))

    def delta_options(self) -> dict[str, str] | None:
        return {**DEFAULT_OPTIONS, **self.options} if self.remote else None

    def open(self) -> DeltaTable:
        """The Delta table; ``DataError`` when it cannot be reached or is not one."""
        if self.remote and not env_has_credentials(self.options):
            raise DataError(self.where, self.field,
                            f"S3 credentials in the environment ({ENV_CREDENTIALS_TEXT}; or "
                            "storage_options AWS_SKIP_SIGNATURE: true for a public bucket)")
        try:
            found = DeltaTable.is_deltatable(self.uri, self.delta_options())
            if found:
                return DeltaTable(self.uri, storage_options=self.delta_options())
        except OSError as exc:
            raise DataError(self.where, self.field,
                            f"a reachable Delta table ({self._endpoint()}: "
                            f"{_first_cause(exc)})") from None
        raise DataError(self.where, self.field,
                        f"a Delta table at {self.uri} (no _delta_log found)")

    def _endpoint(self) -> str:
        ep = self.options.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
        return f"endpoint {ep}" if ep else "AWS S3"

    def read_text(self, rel: str) -> str | None:
        """The text of the file at ``rel`` under the table, None if there is none."""
        if not self.remote:
            p = Path(self.uri) / rel
            return p.read_text() if p.exists() else None
        try:
            with self._fs.open_input_stream(rel) as f:
                return f.read().decode()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DataError(self.where, self.field,
                            f"a readable {rel} ({_first_cause(exc)})") from None

    def commit_time_fallback(self, rel: str) -> int:
        """A commit file's modification time in ms (for a commit without a timestamp)."""
        if not self.remote:
            return int((Path(self.uri) / rel).stat().st_mtime * 1000)
        info = self._fs.get_file_info(rel)
        return int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else 0

    def read_parquet(self, rel: str) -> pa.Table:
        """One data file (``rel``: the add action's path, unquoted)."""
        if not self.remote:
            return pq.read_table(Path(self.uri) / rel)
        try:
            return pq.read_table(rel, filesystem=self._fs)
        except OSError as exc:
            raise DataError(self.where, self.field,
                            f"a readable data file {rel} ({_first_cause(exc)})") from None


def _first_cause(exc: BaseException) -> str:
    """delta-rs' error chain in one line: its first line and its innermost cause."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # (delta-rs colours its chain)
    lines = [ln.strip().lstrip("↳").strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        return type(exc).__name__
    # the XML body of a 404 (NoSuchBucket, ...) carries the store's own words
    code = re.search(r"<Code>([^<]+)</Code>", text)
    inner = code.group(1) if code else lines[-1]
    return lines[0] if inner == lines[0] else f"{lines[0]}: {inner}"

