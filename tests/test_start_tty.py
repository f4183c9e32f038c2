#!/usr/bin/env python3
"""test_start_tty.py: drive `mtplx start` through a pseudo-terminal, as a user
would: a prompt in, text out, the live status line, /stats shows acceptance,
Ctrl-C stops a long reply and the prompt comes back, Ctrl-C at the prompt
drops the line, /quit leaves with 0; then `mtplx start --web` prints the URL,
serves the page there and stops on Ctrl-C.

Usage: test_start_tty.py MTPLX_BIN   (run from the repository root; CTest does)
Exit 0 = pass, 1 = fail.
"""
import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time
import json
import urllib.request

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/mtplx"
ROWS, COLS = 30, 100
ANSI = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|[78=>])")


class Term:
    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.environ["TERM"] = "xterm"
            os.environ.pop("NO_COLOR", None)
            os.execv(argv[0], argv)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.raw = b""
        self.mark = 0

    def read(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            return False
        self.raw += data
        return bool(data)

    def text(self, since=None):
        s = self.raw[self.mark if since is None else since:].decode("utf-8", "replace")
        return ANSI.sub("", s)

    def expect(self, pattern, timeout=60, what=None):
        """Wait until pattern (regex) shows in the output since the mark."""
        t0 = time.time()
        while time.time() - t0 < timeout:
            m = re.search(pattern, self.text())
            if m:
                return m
            self.read(0.2)
        fail("timed out waiting for %s; output since the mark:\n%s" % (what or repr(pattern), self.text()[-3000:]))

    def send(self, s):
        self.mark = len(self.raw)
        os.write(self.fd, s.encode() if isinstance(s, str) else s)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    if not os.path.exists(BIN):
        fail("no binary at " + BIN)
    # greedy, so the reply is the model's most likely text; 3 threads at most on shared machines
    t = Term([os.path.abspath(BIN), "start", "--temp", "0", "-n", "48", "-t", "2"])
    try:
        t.expect(r"loading .*done in \d+ ms", what="the loading line")
        t.expect(r"base model without a chat template", what="the completion-mode notice")
        t.expect(r"\n> $", what="the first prompt")

        # a prompt in, text out, the stats line after it
        prompt = "It was a dark and stormy night"
        t.send(prompt + "\r")
        m = t.expect(r"\[(\d+\.\d) tok/s \| accept [\d./]+ \| mean accepted [\d.]+ \| [\d.]+ tok/forward \| ctx \d+/\d+\]",
                     what="the reply's stats line")
        out = t.text()
        body = out[out.find(prompt, len(prompt)):m.start()] if out.count(prompt) > 1 else out[:m.start()]
        if len(body.strip()) <= len(prompt) + 20:
            fail("no continuation streamed: %r" % out)
        if float(m.group(1)) <= 0:
            fail("tok/s is zero")
        raw = t.raw[t.mark:]
        if b"\x1b[32m" not in raw:
            fail("no drafted (green) token in the reply")
        if not re.search(rb"\x1b7\x1b\[30;1H\x1b\[2K(\x1b\[2m)?[^\x1b]*tok/s \| accept", raw):
            fail("no live status line drawn on the bottom row")
        if b"\x1b[1;29r" not in raw or b"\x1b[1;30r" not in raw:
            fail("the scroll region was not reserved and given back")
        t.expect(r"\n> $", what="the prompt after the reply")

        # /stats shows acceptance per draft position
        t.send("/stats\r")
        t.expect(r"acceptance per draft position:\s*\n\s*position 1: [#.]+ +\d+\.\d%", what="/stats acceptance")
        t.expect(r"mean accepted \d\.\d\d", what="/stats mean accepted")
        t.expect(r"\n> $", what="the prompt after /stats")

        # a long reply, interrupted by Ctrl-C; the prompt comes back
        t.send("/depth 2\r")
        t.expect(r"\(draft depth 2\)\s*\n> $")
        t.send("/temp 0.8\r")
        t.expect(r"\(temperature 0.80\)\s*\n> $")
        t.send("/max 100000\r")  # runs until the context is full: seconds even on a fast machine
        t.expect(r"\(at most 100000 tokens per reply\)\s*\n> $")
        t.send(" And then the ship\r")
        # several tokens of the reply, then Ctrl-C (the pty turns ^C into SIGINT)
        t.expect(r"And then the ship\S*(\s+\S+){6}", what="the long reply to start")
        started = time.time()
        t.send(b"\x03")
        t.expect(r"\[stopped\]", timeout=20, what="[stopped] after Ctrl-C")
        t.expect(r"accept \d\.\d\d/\d\.\d\d \|", what="depth-2 stats after the stopped reply")
        t.expect(r"\n> $", what="the prompt after Ctrl-C")
        if time.time() - started > 20:
            fail("Ctrl-C took too long")

        # Ctrl-C at the prompt drops the half-typed line and keeps the program
        t.send("half a line, café")  # UTF-8 typed at the prompt echoes whole
        t.expect(r"half a line, café$", what="the typed line echoed")
        t.send(b"\x03")
        t.expect(r"\^C\s*\n> $", what="a fresh prompt after Ctrl-C at the prompt")
        t.send("/depth 3\r")
        t.expect(r"\(draft depth 3\)\s*\n> $")
        t.send("\r")  # an empty line is ignored
        t.send("/help\r")
        t.expect(r"/stats .*\n(.*\n)*> $", what="/help")
        t.send("/quit\r")
        deadline = time.time() + 20
        status = None
        while time.time() < deadline:
            t.read(0.2)
            pid, status = os.waitpid(t.pid, os.WNOHANG)
            if pid:
                break
        else:
            fail("mtplx start did not exit after /quit")
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            fail("exit status %r" % status)
        print("ok: mtplx start through a pty (prompt, streamed reply, live status line, /stats, Ctrl-C, /quit)")
    finally:
        kill(t)
    web()


def kill(t):
    try:
        os.kill(t.pid, signal.SIGKILL)
        os.waitpid(t.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def web():
    """`mtplx start --web`: the server in-process, its URL printed, the page served, Ctrl-C stops it."""
    t = Term([os.path.abspath(BIN), "start", "--web", "--port", "0", "-t", "2"])
    try:
        m = t.expect(r"mtplx web UI: (http://127\.0\.0\.1:(\d+)/)", what="the web UI's URL")
        url = m.group(1)
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        if "<title>mtplx</title>" not in page or "/v1/completions" not in page:
            fail("the page at %s is not the web UI" % url)
        models = json.loads(urllib.request.urlopen(url + "v1/models", timeout=30).read())
        if not models.get("data"):
            fail("no model listed at %sv1/models" % url)
        t.send(b"\x03")
        deadline = time.time() + 20
        while time.time() < deadline:
            t.read(0.2)
            pid, status = os.waitpid(t.pid, os.WNOHANG)
            if pid:
                if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
                    fail("mtplx start --web: exit status %r after Ctrl-C" % status)
                print("ok: mtplx start --web serves the page at " + url + " and stops on Ctrl-C")
                return
        fail("mtplx start --web did not stop on Ctrl-C")
    finally:
        kill(t)


if __name__ == "__main__":
    main()
