"""Stores on object storage and HDFS: ``s3://``, ``s3a://``, ``gs://``, ``hdfs://`` (and ``file://``).

A store URI becomes a ``RemotePath``: a small path object with what the store model asks of a
``pathlib.Path`` (names, joins, listing, sizes, whole small files), backed by a ``pyarrow.fs``
filesystem (S3, GCS, HDFS; any other scheme through ``fsspec`` when it is installed). Bulk reads
go through ``RemoteFile`` (``fileio.ReadOnlyFile`` on a remote path): ranged reads with connection
reuse, small reads served from one read-ahead block, since object stores charge per request.

Settings come from each filesystem's standard environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3`` for S3-compatible stores; ``GOOGLE_APPLICATION_
CREDENTIALS``; ``HADOOP_CONF_DIR``/``CLASSPATH``), then from ``--storage-option key=value`` and the
``spark.hadoop.fs.s3a.*`` settings of ``--spark-conf``. The options travel to worker processes and
Spark executors in the environment variable ``RMQTOOL_STORAGE_OPTIONS``.

Plain paths are untouched: ``path()`` returns a ``pathlib.Path`` for them, and every local fast
path (pread, SEEK_DATA, hard links) stays as it was. A remote store is read-only to rmqtool.
"""
from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rmqtool.errors import FileChangedError, MissingDependencyError, UnreadableError, UsageError
from rmqtool.io import throttle

ENV_OPTIONS = "RMQTOOL_STORAGE_OPTIONS"
EXTRA = "pip install 'rmqtool[storage]'"
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
#: S3 option names accepted by --storage-option (pyarrow.fs.S3FileSystem's keywords)
S3_OPTIONS = {"access_key": str, "secret_key": str, "session_token": str, "region": str,
              "endpoint_override": str, "scheme": str, "anonymous": bool, "request_timeout": float,
              "connect_timeout": float, "force_virtual_addressing": bool}
#: spark.hadoop.fs.s3a.* settings mirrored into the S3 options
S3A_CONF = {"spark.hadoop.fs.s3a.endpoint": "endpoint_override",
            "spark.hadoop.fs.s3a.access.key": "access_key",
            "spark.hadoop.fs.s3a.secret.key": "secret_key",
            "spark.hadoop.fs.s3a.session.token": "session_token",
            "spark.hadoop.fs.s3a.endpoint.region": "region",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "ssl",
            "spark.hadoop.fs.s3a.path.style.access": "path_style"}
#: reads shorter than this are served from one read-ahead block of READ_AHEAD bytes
SMALL_READ = 256 << 10
READ_AHEAD = 4 << 20


# --- options ---------------------------------------------------------------------------------
def parse_options(pairs, spark_conf=()) -> dict[str, str]:
    """``--storage-option key=value`` pairs, after the mirrored ``spark.hadoop.fs.s3a.*`` settings."""
    out: dict[str, str] = {}
    for pair in spark_conf or ():
        key, sep, value = pair.partition("=")
        name = S3A_CONF.get(key.strip())
        if sep and name:
            out[name] = value
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--storage-option expects key=value, not {pair!r}")
        out[key.strip()] = value
    return out


def set_options(options: dict[str, str]) -> None:
    """The options of this run, for this process and (through the environment) its workers."""
    if options:
        os.environ[ENV_OPTIONS] = json.dumps(options, sort_keys=True)
    else:
        os.environ.pop(ENV_OPTIONS, None)
    _FILESYSTEMS.clear()


def options() -> dict[str, str]:
    raw = os.environ.get(ENV_OPTIONS)
    if not raw:
        return {}
    try:
        return dict(json.loads(raw))
    except ValueError:
        raise UsageError(f"{ENV_OPTIONS} is not a JSON object") from None


def _truthy(value: str) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _s3_kwargs(opts: dict[str, str]) -> dict:
    kw: dict = {}
    endpoint = (opts.get("endpoint_override") or os.environ.get("AWS_ENDPOINT_URL_S3")
                or os.environ.get("AWS_ENDPOINT_URL"))
    if endpoint:
        m = _URI.match(endpoint)
        if m:
            kw["scheme"] = m.group(1)
            endpoint = m.group(2)
        elif "ssl" in opts:
            kw["scheme"] = "https" if _truthy(opts["ssl"]) else "http"
        kw["endpoint_override"] = endpoint.rstrip("/")
    region = opts.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        kw["region"] = region
    elif endpoint:
        kw["region"] = "us-east-1"        # an S3-compatible store: no region lookup against AWS
    for name, typ in S3_OPTIONS.items():
        if name in opts and name not in ("endpoint_override", "region"):
            value = opts[name]
            kw[name] = _truthy(value) if typ is bool else typ(value)
    if "path_style" in opts:
        kw["force_virtual_addressing"] = not _truthy(opts["path_style"])
    # a put or an open for writing is one request when it is small, not a multipart upload
    kw.setdefault("allow_delayed_open", True)
    kw.setdefault("connect_timeout", 10.0)
    kw.setdefault("request_timeout", 60.0)
    return kw


# --- filesystems -----------------------------------------------------------------------------
_FILESYSTEMS: dict = {}
_LOCK = threading.Lock()


def _pyarrow_fs():
    try:
        import pyarrow.fs as pafs
    except ImportError:
        raise MissingDependencyError(f"store URIs need pyarrow: {EXTRA}") from None
    return pafs


def filesystem(scheme: str, netloc: str):
    """The (cached, per process) pyarrow filesystem for a URI's scheme and authority."""
    opts = options()
    key = (scheme, netloc if scheme == "hdfs" else "", json.dumps(opts, sort_keys=True))
    with _LOCK:
        fs = _FILESYSTEMS.get(key)
        if fs is not None:
            return fs
        pafs = _pyarrow_fs()
        try:
            if scheme in ("s3", "s3a"):
                fs = pafs.S3FileSystem(**_s3_kwargs(opts))
            elif scheme in ("gs", "gcs"):
                fs = pafs.GcsFileSystem(**{k: v for k, v in opts.items()
                                           if k in ("endpoint_override", "scheme", "project_id",
                                                    "access_token", "anonymous")})
            elif scheme in ("hdfs", "viewfs"):
                host, _, port = netloc.partition(":")
                fs = pafs.HadoopFileSystem(host or "default", int(port or 0),
                                           user=opts.get("user") or os.environ.get("HADOOP_USER_NAME"))
            else:
                fs = _fsspec_fs(pafs, scheme, opts)
        except (OSError, ValueError, TypeError) as exc:
            raise UnreadableError(f"cannot open the {scheme}:// filesystem: {first_line(exc)}",
                                  f"{scheme}://{netloc}") from None
        _FILESYSTEMS[key] = fs
        return fs


def _fsspec_fs(pafs, scheme: str, opts: dict):
    try:
        import fsspec
    except ImportError:
        raise UsageError(f"{scheme}:// is not a supported store URI (s3://, s3a://, gs://, hdfs://, "
                         "file://; others with fsspec installed)") from None
    try:
        return pafs.PyFileSystem(pafs.FSSpecHandler(fsspec.filesystem(scheme, **opts)))
    except (ImportError, ValueError) as exc:
        raise UsageError(f"{scheme}:// is not a supported store URI: {first_line(exc)}") from None


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (its class name when it has none), at most 300 characters."""
    text = str(exc).strip() or exc.__class__.__name__
    return text.splitlines()[0][:300]


# --- paths -----------------------------------------------------------------------------------
def is_uri(value) -> bool:
    """A remote URI (``file://`` is a local path): the parse of a location a user typed, done
    once where it enters (``path()``, the CLI, output and staging options). Below that a
    location is an object: ask ``is_remote``."""
    if isinstance(value, RemotePath):
        return True
    if not isinstance(value, str):
        return False
    m = _URI.match(value)
    return bool(m) and m.group(1).lower() != "file"


def is_remote(location) -> bool:
    """Whether a resolved location (``path()``'s ``pathlib.Path`` or ``RemotePath``) lies on a
    remote filesystem: decided by its type, never by parsing a string."""
    return isinstance(location, RemotePath)


def mangled_uri(value) -> bool:
    """A URI that went through ``pathlib.Path`` (``s3://b/k`` became ``s3:/b/k``): an output option
    typed as a local path was given a URI."""
    text = str(value)
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", text)) and not text.lower().startswith("file:")


def path(value):
    """A ``RemotePath`` for a remote URI, else a ``pathlib.Path`` (``file://`` stripped)."""
    if isinstance(value, (RemotePath, Path)):
        return value
    value = os.fspath(value) if not isinstance(value, str) else value
    m = _URI.match(value)
    if m is None:
        return Path(value)
    if m.group(1).lower() == "file":
        rest = m.group(2)
        return Path(rest if rest.startswith("/") else "/" + rest.split("/", 1)[-1])
    return RemotePath(value)


@dataclass(frozen=True)
class _Info:
    size: int
    is_dir: bool
    mtime: float | None = None


class RemotePath:
    """A file or directory (a key prefix) on a remote filesystem, named by its URI."""

    __slots__ = ("scheme", "netloc", "key")

    def __init__(self, uri: str, _parts: tuple | None = None):
        if _parts is not None:
            self.scheme, self.netloc, self.key = _parts
            return
        m = _URI.match(uri)
        if m is None:
            raise UsageError(f"not a URI: {uri!r}")
        scheme = m.group(1).lower()
        netloc, _, key = m.group(2).partition("/")
        if not netloc and scheme not in ("hdfs", "viewfs"):
            raise UsageError(f"{uri}: no bucket in the URI")
        self.scheme, self.netloc = scheme, netloc
        self.key = posixpath.normpath(key).strip("/") if key.strip("/") else ""

    # names and joins
    def __str__(self) -> str:
        return f"{self.scheme}://{self.netloc}/{self.key}" if self.key else f"{self.scheme}://{self.netloc}"

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, RemotePath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other) -> bool:
        return str(self) < str(other)

    def __reduce__(self):
        return (RemotePath, (str(self),))

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1] if self.key else ""

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(p for p in self.key.split("/") if p)

    @property
    def parent(self) -> "RemotePath":
        return RemotePath("", (self.scheme, self.netloc, self.key.rsplit("/", 1)[0] if "/" in self.key else ""))

    def joinpath(self, *names) -> "RemotePath":
        key = self.key
        for n in names:
            n = str(n).strip("/")
            if n:
                key = posixpath.normpath(f"{key}/{n}" if key else n)
        return RemotePath("", (self.scheme, self.netloc, key))

    def __truediv__(self, name) -> "RemotePath":
        return self.joinpath(name)

    def with_name(self, name: str) -> "RemotePath":
        return self.parent / name

    def relative_to(self, other) -> PurePosixPath:
        base = other.key if isinstance(other, RemotePath) else str(other)
        if base and not (self.key == base or self.key.startswith(base + "/")):
            raise ValueError(f"{self} is not under {other}")
        return PurePosixPath(self.key[len(base):].lstrip("/") or ".")

    def resolve(self) -> "RemotePath":
        return self

    absolute = resolve

    @property
    def fs_path(self) -> str:
        """The path the pyarrow filesystem takes (``bucket/key`` on object stores)."""
        if self.scheme in ("hdfs", "viewfs"):
            return "/" + self.key
        return f"{self.netloc}/{self.key}" if self.key else self.netloc

    @property
    def fs(self):
        return filesystem(self.scheme, self.netloc)

    # what is there
    def _info(self) -> _Info | None:
        cached = _INFO.get(str(self))
        if cached is not None:
            return cached
        pafs = _pyarrow_fs()
        try:
            info = self.fs.get_file_info(self.fs_path)
        except OSError as exc:
            raise remote_error(exc, self) from None
        if info.type == pafs.FileType.NotFound:
            return None
        got = _Info(info.size or 0, info.type == pafs.FileType.Directory,
                    info.mtime.timestamp() if info.mtime else None)
        _INFO[str(self)] = got
        return got

    def exists(self) -> bool:
        return self._info() is not None

    def is_dir(self) -> bool:
        info = self._info()
        return info is not None and info.is_dir

    def is_file(self) -> bool:
        info = self._info()
        return info is not None and not info.is_dir

    def is_symlink(self) -> bool:
        return False

    def stat(self):
        info = self._info()
        if info is None:
            raise FileNotFoundError(2, "no such object", str(self))
        return os.stat_result((0o040555 if info.is_dir else 0o100444, 0, 0, 1, 0, 0, info.size,
                               info.mtime or 0, info.mtime or 0, info.mtime or 0))

    def iterdir(self):
        return iter([e.path for e in scandir(self)])

    def glob(self, pattern: str):
        """Children (one level per pattern part) whose names match ``pattern``."""
        found = [self]
        for part in pattern.split("/"):
            found = [e.path for d in found if d.is_dir() for e in scandir(d) if fnmatch.fnmatchcase(e.name, part)]
        return iter(sorted(found))

    def read_bytes(self) -> bytes:
        """The whole object; FileNotFoundError when there is none (as pathlib's)."""
        if self._info() is None:
            raise FileNotFoundError(2, "no such object", str(self))
        f = RemoteFile(self)
        try:
            size = f.size()
            data = f.read_at(0, size)
        finally:
            f.close()
        throttle.consume(len(data))
        if len(data) < size:
            raise FileChangedError(f"file shorter than expected (wanted {size} bytes, got {len(data)})",
                                   str(self), len(data))
        return data

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def open(self, mode: str = "rb", encoding: str | None = None):
        import io
        if "r" not in mode:
            raise UsageError(f"{self}: remote stores are read-only to rmqtool")
        data = io.BytesIO(self.read_bytes())
        return data if "b" in mode else io.TextIOWrapper(data, encoding=encoding or "utf-8")


#: what listings and lookups learnt (object stores are snapshots: no invalidation within a run)
_INFO: dict[str, _Info] = {}


class RemoteEntry:
    """An ``os.DirEntry`` look-alike for one child of a listed remote directory."""

    __slots__ = ("path", "name", "_info")

    def __init__(self, path: RemotePath, info: _Info):
        self.path, self.name, self._info = path, path.name, info

    def is_dir(self, follow_symlinks: bool = True) -> bool:
        return self._info.is_dir

    def is_file(self, follow_symlinks: bool = True) -> bool:
        return not self._info.is_dir

    def is_symlink(self) -> bool:
        return False

    def stat(self, follow_symlinks: bool = True):
        return self.path.stat()


def scandir(directory):
    """``os.scandir`` for local paths (a list), ``RemoteEntry``s for a remote directory; raises
    FileNotFoundError / NotADirectoryError like ``os.scandir``."""
    if not isinstance(directory, RemotePath):
        it = os.scandir(directory)
        try:
            return list(it)
        finally:
            getattr(it, "close", lambda: None)()
    pafs = _pyarrow_fs()
    info = directory._info()
    if info is None:
        raise FileNotFoundError(2, "no such directory", str(directory))
    if not info.is_dir:
        raise NotADirectoryError(20, "not a directory", str(directory))
    try:
        infos = directory.fs.get_file_info(pafs.FileSelector(directory.fs_path, recursive=False,
                                                             allow_not_found=True))
    except OSError as exc:
        raise remote_error(exc, directory) from None
    out = []
    for i in infos:
        child = directory / i.base_name
        got = _Info(i.size or 0, i.type == pafs.FileType.Directory, i.mtime.timestamp() if i.mtime else None)
        _INFO[str(child)] = got
        out.append(RemoteEntry(child, got))
    out.sort(key=lambda e: e.name)
    return out


def listdir(directory) -> list[str]:
    if not isinstance(directory, RemotePath):
        return os.listdir(directory)
    return [e.name for e in scandir(directory)]


def walk(root):
    """``os.walk`` of a remote tree: (directory, its subdirectory names, its file names), top down."""
    todo = [root]
    while todo:
        d = todo.pop(0)
        entries = scandir(d)
        dirs = [e.name for e in entries if e.is_dir()]
        yield d, dirs, [e.name for e in entries if not e.is_dir()]
        todo[:0] = [d / n for n in dirs]


def glob(pattern: str) -> list[str]:
    """The URIs matching a remote pattern (``*``, ``?``, ``[...]`` within a path part), sorted."""
    base = RemotePath(pattern)
    parts = list(base.parts)
    first = next((i for i, p in enumerate(parts) if any(ch in p for ch in "*?[")), None)
    if first is None:
        return [str(base)] if base.exists() else []
    root = RemotePath("", (base.scheme, base.netloc, "/".join(parts[:first])))
    return [str(p) for p in root.glob("/".join(parts[first:]))]


def remote_error(exc: OSError, where) -> Exception:
    """The one-line error for a failed remote call: a missing bucket or object, refused
    credentials, an endpoint that does not answer."""
    from rmqtool.errors import StoreLayoutError
    text = first_line(exc)
    if isinstance(exc, FileNotFoundError) or "NoSuchBucket" in text or "does not exist" in text:
        return StoreLayoutError(f"not found on the remote store ({text})", str(where))
    return UnreadableError(f"remote read failed: {text}", str(where))


# --- whole objects: staging parts and small outputs ----------------------------------------------
def read_bytes(uri) -> bytes:
    return path(uri).read_bytes()


def write_bytes(uri, data: bytes) -> None:
    """Write one whole object (one request when small); local paths are written in place."""
    p = path(uri)
    if not isinstance(p, RemotePath):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        return
    try:
        with p.fs.open_output_stream(p.fs_path) as out:
            out.write(data)
    except OSError as exc:
        raise UnreadableError(f"remote write failed: {first_line(exc)}", str(p)) from None
    _INFO.pop(str(p), None)


def remove(uri) -> None:
    p = path(uri)
    if not isinstance(p, RemotePath):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        return
    try:
        p.fs.delete_file(p.fs_path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise UnreadableError(f"remote delete failed: {first_line(exc)}", str(p)) from None
    _INFO.pop(str(p), None)


def remove_tree(uri) -> None:
    p = path(uri)
    if not isinstance(p, RemotePath):
        import shutil
        shutil.rmtree(p, ignore_errors=True)
        return
    try:
        p.fs.delete_dir(p.fs_path)
    except FileNotFoundError:
        pass
    except OSError:
        pass                      # best effort: a prefix with nothing under it is already gone
    for k in [k for k in _INFO if k == str(p) or k.startswith(str(p) + "/")]:
        _INFO.pop(k, None)


# --- ranged reads ----------------------------------------------------------------------------
class RemoteFile:
    """An open remote object read by ranges, the size fixed at open (like a local file's at the
    start of a walk); small reads are served from a read-ahead block."""

    def __init__(self, p: RemotePath):
        self.path = p
        try:
            self._fh = p.fs.open_input_file(p.fs_path)
            self._size = self._fh.size()
        except FileNotFoundError:
            raise FileChangedError("file vanished (no such object)", str(p)) from None
        except OSError as exc:
            text = first_line(exc)
            if "NoSuchKey" in text or "not found" in text.lower() or "Path does not exist" in text:
                raise FileChangedError(f"file vanished (no such object: {text})", str(p)) from None
            if "is a directory" in text.lower() or "Cannot open directory" in text:
                from rmqtool.errors import StoreLayoutError
                raise StoreLayoutError("is a directory, expected a file", str(p)) from None
            raise UnreadableError(f"cannot open: {text}", str(p)) from None
        self._block_pos = -1
        self._block = b""

    def size(self) -> int:
        return self._size

    def read_at(self, pos: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``pos`` (fewer only at the end of the object)."""
        length = max(0, min(length, self._size - pos))
        if length == 0:
            return b""
        if length <= SMALL_READ:
            b0 = self._block_pos
            if not (0 <= b0 <= pos and pos + length <= b0 + len(self._block)):
                self._block_pos = pos
                self._block = self._range(pos, min(READ_AHEAD, self._size - pos))
                b0 = pos
            return self._block[pos - b0:pos - b0 + length]
        return self._range(pos, length)

    def _range(self, pos: int, length: int) -> bytes:
        try:
            return self._fh.read_at(length, pos)
        except OSError as exc:
            raise UnreadableError(f"read failed: {first_line(exc)}", str(self.path), pos) from None

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError:
            pass
