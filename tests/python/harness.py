"""Shared by the Python end-to-end tests (run by ctest as `python3 test_X.py --stride BIN
--work DIR`): counting checks, a clean environment for the stride binary, and the closing
'N passed, M failed' line. A run that checks nothing fails."""
import os


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


def clean_env(extra=None):
    """The process environment without the variables that steer stride's weight layout
    (so that the caller's shell cannot change a test), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRIDE_", "GGML_CUDA_NO_PAD"))}
    env.update(extra or {})
    return env
