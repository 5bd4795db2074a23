"""flask served with and without ngw_contrib.werkzeug_memo, side by side, without ngd.

    python3 benches/plugin/flask_builders_probe.py [--runs N] [--routes N]

Starts two workers of the fidelity venv's flask through the SDK's test driver (which
plays ngd): one preloads ngw_contrib.metadata_memo only, the other also
ngw_contrib.werkzeug_memo. For the fidelity suite's app.py (`/hello` and the static rule)
and for an application of --routes static rules, it runs `flask routes` 5 times in each
(so the memo learns the application's builders), then --runs times in each, interleaved
(ABBA), and prints the medians of the driver's wall time per session. Needs the fidelity
venv (sdk/python/tests/install-fidelity, in $NGD_PEERS_DIR or ~/.cache/ngd-peers).
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "..", "sdk", "python", "tests")
sys.path[:0] = [os.path.join(HERE, "..", "..", "sdk", "python", "src"), TESTS]

import driver  # noqa: E402
from support import client_env  # noqa: E402

PEERS = os.environ.get("NGD_PEERS_DIR") or os.path.expanduser("~/.cache/ngd-peers")
BIN = os.path.join(PEERS, "venv-fidelity", "bin")

APP = 'from flask import Flask\napp = Flask(__name__)\n\n@app.route("/hello")\n' \
      'def hello():\n    return "hi"\n'
MANY = 'from flask import Flask\napp = Flask(__name__)\nfor i in range(%d):\n' \
       '    app.add_url_rule("/route%%d" %% i, "route%%d" %% i, lambda: "hi")\n'


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--routes", type=int, default=100)
    opts = ap.parse_args()
    root = tempfile.mkdtemp(prefix="ngd-flask-probe-")
    workers = {}
    try:
        with open(os.path.join(root, "app.py"), "w") as f:
            f.write(APP)
        with open(os.path.join(root, "many.py"), "w") as f:
            f.write(MANY % opts.routes)
        env = client_env(LANG="C.UTF-8")
        for name, preloads in (("without", ["ngw_contrib.metadata_memo"]),
                               ("with", ["ngw_contrib.metadata_memo",
                                         "ngw_contrib.werkzeug_memo"])):
            argv = [os.path.join(BIN, "python"), "-m", "ngw", "console-script",
                    os.path.join(BIN, "flask")]
            for p in preloads:
                argv += ["--preload", p]
            state = os.path.join(root, "state-" + name)
            os.mkdir(state)
            workers[name] = driver.Worker(argv, env=dict(env, NGW_STATE_DIR=state,
                                                         PYTHONPATH=driver.SRC))
            workers[name].hello(120)
        print("| application | without the builder memo | with it |")
        print("|---|---|---|")
        for app, label in (("app.py", "app.py"), ("many.py", "%d static rules" % opts.routes)):
            e = dict(env, FLASK_APP=app)
            for w in workers.values():
                for _ in range(5):
                    w.run("flask", ["routes"], env=e, cwd=root)
                    time.sleep(0.1)
            times = {name: [] for name in workers}
            for i in range(opts.runs):
                for name in (("without", "with") if i % 2 else ("with", "without")):
                    t = time.perf_counter()
                    r = workers[name].run("flask", ["routes"], env=e, cwd=root)
                    times[name].append(time.perf_counter() - t)
                    if r.code != 0:
                        raise SystemExit("flask routes failed: %r" % (r,))
                    time.sleep(0.03)
            print("| %s | %.2f ms | %.2f ms |" % (
                label, statistics.median(times["without"]) * 1e3,
                statistics.median(times["with"]) * 1e3))
    finally:
        for w in workers.values():
            try:
                w.quit()
            finally:
                w.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
