"""Shared by the Python end-to-end tests (run by ctest as `python3 test_X.py --stride BIN
--work DIR`): counting checks, a clean environment for the stride binary, and the closing
'N passed, M failed' line. A run that checks nothing fails."""
import atexit
import os
import shutil
import tempfile


class Checks:
    def __init__(self):
        self.failures = []
        self.count = 0

    def check(self, cond, what):
        self.count += 1
        if not cond:
            self.failures.append(what)
            print(f"FAIL: {what}", flush=True)
        return bool(cond)

    @property
    def passed(self):
        return self.count - len(self.failures)

    @property
    def failed(self):
        return len(self.failures)

    def exit_code(self):
        print(f"{self.count - len(self.failures)} passed, {len(self.failures)} failed")
        return 1 if self.failures or self.count == 0 else 0


_CACHE_HOME = None


def clean_env(extra=None):
    """The process environment without the variables that steer stride's weight layout
    (so that the caller's shell cannot change a test), with a private calibration cache
    (`--pad-weights auto` reads and writes $XDG_CACHE_HOME/stride: a test must neither see
    the user's decisions nor leave its own behind), plus `extra`."""
    global _CACHE_HOME
    if _CACHE_HOME is None:
        _CACHE_HOME = tempfile.mkdtemp(prefix="stride-test-cache-")
        atexit.register(shutil.rmtree, _CACHE_HOME, True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRIDE_", "GGML_CUDA_NO_PAD"))}
    env["XDG_CACHE_HOME"] = _CACHE_HOME
    env.update(extra or {})
    return env
