"""The witness: grading's observer inside the test process, which records what each test's own body did.

Shipped into the grading container as ``creditgym_witness`` and armed by a ``sitecustomize`` that the eval script
puts first on ``PYTHONPATH`` for the test command, so it runs before any code of the repository. It arms only in a
test runner's process (``-m unittest``/``pytest``/``django``, ``pytest``, ``runtests.py``) that was handed the
grading's key on the pipe named by ``CREDITGYM_WITNESS_FD`` (then it closes the pipe and drops the variable), and:

- wraps each test body, innermost (unittest: the test method, set on the instance by ``TestCase.__init__``;
  pytest: ``item.obj`` during ``pytest_pyfunc_call``) and records what it did: returned, raised, skipped;
- after a body that returned, checks that the test's own assertions still fail (probes); a trace function set
  before or during the body (it can rewrite what an assertion compares; seen by an audit hook on 3.8+) voids it;
- vouches for a test only when its code object is one compiled from a test file as that file was at start-up;
- writes an ``armed`` record at once and the test records at exit, each line signed with HMAC-SHA256 under the key.

The grader trusts a graded test's pass only if the witness recorded it passing (``integrity.witness_check``).
Python 3.5+ inside the container: no annotations, no f-strings; importing this module does nothing.
"""
# ruff: noqa: UP031

import atexit
import contextlib
import functools
import hashlib
import hmac
import inspect
import json
import os
import sys

PREFIX = "CREDITGYM-WITNESS"
FD_ENV = "CREDITGYM_WITNESS_FD"
FILES_ENV = "CREDITGYM_WITNESS_FILES"
RUNNER_MODULES = ("unittest", "pytest", "py.test", "django")
RUNNER_SCRIPTS = ("pytest", "py.test", "runtests.py")
PASSING = ("PASSED", "XFAIL")
MAX_RECORD_CHARS = 1 << 20  # a record is a few hundred characters; a longer line is not read
_CHAIN = 32  # most __wrapped__ links followed to a test's own function
_WITNESS = None  # the armed witness of this process, if any


def sign(key, payload):
    """The MAC of one record's payload (``key``: bytes)."""
    return hmac.new(key, payload.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def record_line(key, record):
    payload = json.dumps(record, sort_keys=True)
    return "%s %s %s" % (PREFIX, sign(key, payload), payload)


def read_records(log, key, keep=None):
    """(the records of ``log`` signed under ``key`` that ``keep`` accepts, how many witness lines did not verify).

    One pass over the log: only lines that start with :data:`PREFIX` are read, each once, and the scan goes on
    from the end of each line (a line holding the prefix a million times costs one scan, not a million). A line
    longer than :data:`MAX_RECORD_CHARS` is counted as not verified unread. Only the kept records are held
    (``keep(record)``: default all).
    """
    records, forged = [], 0
    at = 0 if log.startswith(PREFIX) else log.find("\n" + PREFIX)
    while at >= 0:
        if log[at] == "\n":
            at += 1
        end = log.find("\n", at)
        end = len(log) if end < 0 else end
        record = None
        if end - at <= MAX_RECORD_CHARS:
            parts = log[at:end].rstrip("\r").split(" ", 2)
            if len(parts) == 3 and hmac.compare_digest(
                parts[1].encode("utf-8", "replace"), sign(key, parts[2]).encode()
            ):
                with contextlib.suppress(ValueError):
                    record = json.loads(parts[2])
        if not isinstance(record, dict):
            forged += 1
        elif keep is None or keep(record):
            records.append(record)
        at = log.find("\n" + PREFIX, end)
    return records, forged


def is_runner(argv):
    """Whether a Python command line (``argv[0]`` the interpreter) runs a test runner the witness can observe."""
    args, i = argv[1:], 0
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            return i + 1 < len(args) and args[i + 1] in RUNNER_MODULES
        if arg.startswith("-m"):
            return arg[2:] in RUNNER_MODULES
        if arg == "-c" or arg.startswith("-c"):
            return False
        if arg in ("-W", "-X", "-Q"):
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return os.path.basename(arg) in RUNNER_SCRIPTS
    return False


def _argv():
    with open("/proc/self/cmdline", "rb") as fh:
        return [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]


def _read_key(fd):
    data = b""
    while len(data) < 256:
        chunk = os.read(fd, 256)
        if not chunk or b"\n" in chunk:
            data += chunk
            break
        data += chunk
    os.close(fd)
    key = data.strip()
    if len(key) < 32:
        raise ValueError("the witness key is missing or short")
    return key


def install():
    """Arm the witness in this process if it runs a test runner and was handed a key; the witness or None."""
    global _WITNESS
    fd = os.environ.get(FD_ENV)
    if fd is None or _WITNESS is not None or not is_runner(_argv()):
        return None
    del os.environ[FD_ENV]
    key = _read_key(int(fd))
    with open(os.environ.pop(FILES_ENV)) as fh:
        files = json.load(fh)
    witness = _Witness(key, os.getcwd(), files)
    witness.out = os.dup(1)
    atexit.register(witness.flush)
    witness.emit([{"kind": "armed", "pid": os.getpid()}])
    _hook_unittest(witness)
    plugins = [p for p in os.environ.get("PYTEST_PLUGINS", "").split(",") if p]
    os.environ["PYTEST_PLUGINS"] = ",".join([*plugins, __name__])
    if hasattr(sys, "addaudithook"):
        sys.addaudithook(witness.audit)
    _WITNESS = witness
    return witness


class _Witness:
    def __init__(self, key, root, files):
        self.key, self.root, self.out = key, os.path.realpath(root), None
        self.records, self.current, self.pytest_config = [], None, None
        self.digests = {}
        for name in files:
            path = os.path.realpath(os.path.join(self.root, name))
            with contextlib.suppress(OSError), open(path, "rb") as fh:
                self.digests[path] = hashlib.sha256(fh.read()).digest()
        self.codes, self.sources = {}, {}

    # -- records --------------------------------------------------------------------------------------------

    def emit(self, records):
        text = "".join("\n" + record_line(self.key, r) for r in records) + "\n"
        data = text.encode("utf-8", "replace")
        while data:
            data = data[os.write(self.out, data) :]

    def flush(self):
        with contextlib.suppress(OSError):
            self.emit(self.records)

    def audit(self, event, args):
        if event == "sys.settrace" and self.current is not None:
            self.current["flags"].append("a trace function was set during the test")

    # -- genuine test code ----------------------------------------------------------------------------------

    def genuine(self, func):
        """Whether ``func`` (through ``__wrapped__``) is code compiled from a test file as it was at start-up."""
        for _ in range(_CHAIN):
            if not hasattr(func, "__wrapped__"):
                break
            func = func.__wrapped__
        code = getattr(func, "__code__", None)
        if code is None:
            return False
        codes = self._codes(os.path.realpath(code.co_filename))
        return codes is not None and code in codes

    def mentions(self, func, word):
        """Whether the test file ``func`` comes from, as it was at start-up, holds ``word`` (an xfail mark)."""
        code = getattr(inspect.unwrap(func), "__code__", None)
        path = os.path.realpath(code.co_filename) if code is not None else ""
        return self._codes(path) is not None and word in self.sources[path]

    def _codes(self, path):
        if path not in self.codes:
            self.codes[path] = None
            data = _read(path) if path in self.digests else None
            if data is not None and hashlib.sha256(data).digest() == self.digests[path]:
                found = set()
                for module in _compiled(data, path, self.pytest_config):
                    _collect(module, found)
                self.codes[path], self.sources[path] = found, data
        return self.codes[path]

    # -- one test body --------------------------------------------------------------------------------------

    def begin(self, ids, func):
        flags = [] if sys.gettrace() is None else ["a trace function was active when the test started"]
        record = {"kind": "test", "ids": ids, "genuine": self.genuine(func), "flags": flags}
        self.current = record
        return record

    def end(self, record, status):
        record["status"] = status
        self.current = None
        self.records.append(record)

    def subtest_failed(self):
        if self.current is not None:
            self.current["subtest_failed"] = True


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _compiled(data, path, config):
    """The module code objects ``data`` compiles to: as Python imports it, and as pytest rewrites it."""
    out = []
    with contextlib.suppress(Exception):
        out.append(compile(data, path, "exec", dont_inherit=True))
    if config is not None:
        with contextlib.suppress(Exception):
            import ast

            from _pytest.assertion import rewrite

            tree = ast.parse(data, filename=path)
            try:
                rewrite.rewrite_asserts(tree, data, path, config)
            except TypeError:  # pytest < 5: no source argument
                tree = ast.parse(data, filename=path)
                rewrite.rewrite_asserts(tree, path, config)
            out.append(compile(tree, path, "exec", dont_inherit=True))
    return out


def _collect(code, found):
    found.add(code)
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _collect(const, found)


# --------------------------------------------------------------------------- unittest


def _probe_misses(test):
    """Assertions of ``test`` that did not fail when they must (empty: the framework is intact)."""
    nonce = os.urandom(8).hex()
    checks = (
        ("assertEqual", lambda: test.assertEqual(nonce, nonce + "!")),
        ("assertTrue", lambda: test.assertTrue(not nonce)),
        ("assertFalse", lambda: test.assertFalse(nonce)),
        ("assertIn", lambda: test.assertIn(nonce, ())),
        ("assertIsNone", lambda: test.assertIsNone(nonce)),
        ("assertRaises", lambda: test.assertRaises(KeyError, len, nonce)),
        ("fail", lambda: test.fail(nonce)),
    )
    missed = []
    for name, check in checks:
        try:
            check()
        except Exception:
            continue
        missed.append(name)
    try:
        with test.assertRaises(KeyError):
            pass
    except Exception:
        pass
    else:
        missed.append("assertRaises as a context manager")
    return missed


def _unittest_ids(witness, test, name):
    cls = type(test)
    qualname = getattr(cls, "__qualname__", cls.__name__)
    ids = ["u:%s.%s.%s" % (cls.__module__, qualname, name)]
    doc = test.shortDescription() if hasattr(test, "shortDescription") else None
    if doc:
        ids.append("d:" + doc)
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if path:
        rel = os.path.relpath(os.path.realpath(path), witness.root)
        if not rel.startswith(".."):
            ids.append("p:%s::%s::%s" % (rel, qualname.replace(".", "::"), name))
    return ids


def _unittest_status(witness, test, func, exc):
    import unittest

    if isinstance(exc, unittest.SkipTest):
        return "SKIPPED"
    expecting = getattr(func, "__unittest_expecting_failure__", False) or getattr(
        type(test), "__unittest_expecting_failure__", False
    )
    if expecting and witness.mentions(func, b"expectedFailure"):
        return "XFAIL"
    return "FAILED"


def _observed(witness, func, call, begin, raised, returned):
    """A body that runs ``call(*args, **kwargs)`` (a coroutine when ``func`` is one) and records what it did:
    ``begin()`` opens the record, ``raised(exc)`` names the status of an exception, ``returned(record)`` ends a
    body that returned."""

    if inspect.iscoroutinefunction(func):

        async def body(*args, **kwargs):
            record = begin()
            try:
                result = await call(*args, **kwargs)
            except BaseException as exc:
                witness.end(record, raised(exc))
                raise
            returned(record)
            return result

    else:

        def body(*args, **kwargs):
            record = begin()
            try:
                result = call(*args, **kwargs)
            except BaseException as exc:
                witness.end(record, raised(exc))
                raise
            returned(record)
            return result

    return functools.update_wrapper(body, func)


def _unittest_body(witness, test, func):
    """The observed body that replaces ``test``'s method: the same call, and a record of what it did."""

    def begin():
        return witness.begin(_unittest_ids(witness, test, test._testMethodName), func)

    def returned(record):
        record["missed"] = _probe_misses(test)
        failed = record.pop("subtest_failed", False) or getattr(func, "__unittest_expecting_failure__", False)
        witness.end(record, "FAILED" if failed else "PASSED")

    def raised(exc):
        return _unittest_status(witness, test, func, exc)

    return _observed(witness, func, func.__get__(test, type(test)), begin, raised, returned)


def _hook_unittest(witness):
    import unittest.case as case

    real_init, real_subtest = case.TestCase.__init__, case.TestCase.subTest

    def __init__(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        name = getattr(self, "_testMethodName", None)
        func = getattr(type(self), name, None) if name else None
        if inspect.isfunction(func):
            self.__dict__[name] = _unittest_body(witness, self, func)

    @contextlib.contextmanager
    def subTest(self, *args, **kwargs):
        with real_subtest(self, *args, **kwargs):
            try:
                yield
            except BaseException as exc:
                if not isinstance(exc, case.SkipTest):
                    witness.subtest_failed()
                raise

    functools.update_wrapper(__init__, real_init)
    case.TestCase.__init__, case.TestCase.subTest = __init__, subTest


# --------------------------------------------------------------------------- pytest (a plugin: PYTEST_PLUGINS)


def _pytest_status(witness, func, marked, exc):
    kind = type(exc).__name__
    if kind == "Skipped":
        return "SKIPPED"
    if kind == "XFailed" or (marked and isinstance(exc, Exception)):
        return "XFAIL" if witness.mentions(func, b"xfail") else "FAILED"
    return "FAILED"


def _pytest_body(witness, func, item):
    marker = getattr(item, "get_closest_marker", None)
    marked = (marker("xfail") if marker else item.get_marker("xfail")) is not None
    ids = ["p:" + item.nodeid]
    return _observed(
        witness,
        func,
        func,
        lambda: witness.begin(ids, func),
        lambda exc: _pytest_status(witness, func, marked, exc),
        lambda record: witness.end(record, "PASSED"),
    )


def pytest_configure(config):
    if _WITNESS is not None:
        _WITNESS.pytest_config = config


def pytest_pyfunc_call(pyfuncitem):
    if _WITNESS is None:
        yield
        return
    original = pyfuncitem.obj
    pyfuncitem.obj = _pytest_body(_WITNESS, original, pyfuncitem)
    try:
        yield
    finally:
        pyfuncitem.obj = original


# pluggy reads these options from the function (what @pytest.hookimpl(hookwrapper=True) sets), so importing this
# module needs no pytest
pytest_pyfunc_call.pytest_impl = {
    "hookwrapper": True,
    "optionalhook": False,
    "tryfirst": True,
    "trylast": False,
    "specname": None,
    "wrapper": False,
}
