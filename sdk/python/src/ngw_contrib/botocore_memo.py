"""Memos for botocore programs (the aws CLI 1.x): preload after the program's modules,

    python3 -m ngw entrypoint aws=awscli.clidriver:main \\
        --preload ngw_contrib.awscli --preload ngw_contrib.botocore_memo

Every ``aws`` run builds a new botocore ``Session``, and with it work that depends only on
botocore's and awscli's code and the model files installed with them:

* the scan of the data directories for the services that exist (``Loader.
  list_available_services``: some 850 directory listings and 3,400 ``stat`` calls), cached
  by botocore per ``Loader`` only;
* the alias lookup of each event name a handler is registered for (``EventAliaser.
  _alias_event_name``), cached per emitter;
* ``inspect.getfullargspec`` of each of the ~380 handlers registered (``accepts_kwargs``),
  not cached at all.

Together about two thirds of a warm ``aws --version``. This module memoises each
process-wide and fills the memos in the zygote by building one session and registering
awscli's built-in handlers on it, as ``main()`` does, without reading any configuration.
What stays per run, as in a cold run:

* directories outside the installed ``botocore`` and ``awscli`` packages
  (``~/.aws/models``, any ``AWS_DATA_PATH`` of the client's) are scanned on every run, so a
  model added there is seen by the next run;
* with botocore's debug logging on (``aws --debug``), event names are aliased by botocore
  itself, so the same ``Changing event name`` records are written;
* ``accepts_kwargs`` is memoised by code object, for plain functions, bound methods and
  ``functools.partial`` objects over them (closures made anew on every run share their
  code); any other callable, or a function with its own ``__signature__``, is inspected as
  before.

The installed packages are frozen in the zygote's memory along with its code: after
upgrading botocore or awscli, reload ngd (``ngd reload`` replaces changed plugins; or
restart it) as you would have to for the code.

``install()`` is idempotent; importing the module calls it. ``stats()`` says how many
lookups each memo answered (in the zygote: since the start; in a child: since its fork).
"""

import functools
import logging
import os
import sys
import types

import botocore
import botocore.compat
import botocore.hooks
import botocore.loaders
import botocore.session
import botocore.utils

_installed = False
#: The memos that could not be installed on this botocore.
skipped = []
_hits = {"scan": 0, "alias": 0, "argspec": 0}

# (path, type_name, file loader class) -> frozenset of service names, for paths inside
# a frozen package.
_scan_memo = {}
# event name -> aliased name, for emitters using botocore's default EVENT_ALIASES.
_alias_memo = {}
_alias_snapshot = None
# code object -> accepts **kwargs (see _argspec_key).
_argspec_memo = {}
_MISSING = object()

_hooks_logger = logging.getLogger(botocore.hooks.__name__)


def _package_dir(name):
    try:
        module = __import__(name)
    except ImportError:
        return None
    path = getattr(module, "__file__", None)
    return os.path.realpath(os.path.dirname(path)) if path else None


def _frozen_roots():
    roots = []
    for name in ("botocore", "awscli"):
        root = _package_dir(name)
        if root:
            roots.append(root + os.sep)
    return tuple(roots)


_roots = ()


def is_frozen(path):
    """True if `path` is inside an installed botocore or awscli package."""
    real = os.path.realpath(path) + os.sep
    return any(real.startswith(root) for root in _roots)


def _with_paths(loader, paths):
    """A copy of `loader` that searches only `paths`, with an empty cache of its own."""
    one = object.__new__(type(loader))
    one.__dict__.update(loader.__dict__)
    one._search_paths = list(paths)
    one._cache = {}
    return one


def _scan(loader, path, type_name, original):
    # The file loader decides which files count (botocore's: .json and .json.gz).
    key = (path, type_name, type(loader.file_loader))
    found = _scan_memo.get(key)
    if found is None:
        found = frozenset(original(_with_paths(loader, [path]), type_name))
        _scan_memo[key] = found
    else:
        _hits["scan"] += 1
    return found


def _install_scan():
    original = botocore.loaders.Loader.list_available_services
    # The undecorated method: botocore wraps it in instance_cache; the replacement is
    # wrapped again below, so a Loader still caches its own answers. The services found
    # are the union of those found in each search path, so each frozen path's share can
    # be memoised on its own.
    inner = _unwrap_instance_cache(original)
    if not hasattr(botocore.loaders.Loader, "search_paths"):
        raise RuntimeError("Loader has no search_paths")

    def list_available_services(self, type_name):
        services = set()
        live = []
        for path in self.search_paths:
            if not os.path.isdir(path):
                continue
            if path in _frozen_paths or is_frozen(path):
                _frozen_paths.add(path)
                services |= _scan(self, path, type_name, inner)
            else:
                live.append(path)
        if live:
            services.update(inner(_with_paths(self, live), type_name))
        return sorted(services)

    list_available_services.__doc__ = original.__doc__
    botocore.loaders.Loader.list_available_services = botocore.loaders.instance_cache(
        list_available_services
    )


_frozen_paths = set()


def _unwrap_instance_cache(wrapper):
    """The function botocore's instance_cache closed over."""
    for cell in getattr(wrapper, "__closure__", None) or ():
        inner = cell.cell_contents
        if isinstance(inner, types.FunctionType) and inner.__name__ == "list_available_services":
            return inner
    raise RuntimeError("Loader.list_available_services is not instance_cache-wrapped")


def _install_alias():
    global _alias_snapshot
    aliaser = botocore.hooks.EventAliaser
    original = aliaser._alias_event_name
    defaults = botocore.utils.EVENT_ALIASES
    _alias_snapshot = dict(defaults)

    def _alias_event_name(self, event_name):
        cache = self._alias_name_cache
        if (
            event_name not in cache
            and self._event_aliases is defaults
            and not _hooks_logger.isEnabledFor(logging.DEBUG)
        ):
            aliased = _alias_memo.get(event_name)
            if aliased is not None and defaults == _alias_snapshot:
                _hits["alias"] += 1
                cache[event_name] = aliased
                return aliased
            aliased = original(self, event_name)
            if defaults == _alias_snapshot:
                _alias_memo[event_name] = aliased
            return aliased
        return original(self, event_name)

    aliaser._alias_event_name = _alias_event_name


def _argspec_key(func):
    """What decides `accepts_kwargs(func)` for the callables that can be memoised: the code
    object of a plain function (its flags say whether it takes **kwargs; closures made
    anew on every run share it), also under a bound method or a functools.partial, which
    keep the function's **kwargs. None for anything else."""
    while True:
        if isinstance(func, types.MethodType):
            func = func.__func__
        elif isinstance(func, functools.partial):
            func = func.func
        else:
            break
    if not isinstance(func, types.FunctionType):
        return None
    if "__signature__" in func.__dict__ or "__wrapped__" in func.__dict__:
        return None
    return func.__code__


def _install_argspec():
    original = botocore.compat.accepts_kwargs

    def accepts_kwargs(func):
        key = _argspec_key(func)
        if key is None:
            return original(func)
        known = _argspec_memo.get(key, _MISSING)
        if known is _MISSING:
            known = _argspec_memo[key] = original(func)
        else:
            _hits["argspec"] += 1
        return known

    botocore.compat.accepts_kwargs = accepts_kwargs
    botocore.hooks.accepts_kwargs = accepts_kwargs


def _fill():
    """Does in the zygote what every run does first: a session, awscli's handlers."""
    session = botocore.session.Session()
    emitter = session.get_component("event_emitter")
    try:
        import awscli.clidriver
        import awscli.plugin

        session = botocore.session.Session(awscli.clidriver.EnvironmentVariables)
        emitter = session.get_component("event_emitter")
        awscli.plugin.load_plugins({}, event_hooks=emitter)
    except ImportError:
        pass
    session.get_component("data_loader").list_available_services("service-2")


def install():
    """Installs the memos and fills them (once per process)."""
    global _installed, _roots
    if _installed:
        return
    _installed = True
    _roots = _frozen_roots()
    for name, step in (("scan", _install_scan), ("alias", _install_alias),
                       ("argspec", _install_argspec)):
        # A botocore whose internals differ from the ones this was written against keeps
        # its own behaviour for that part (and the worker's log says so).
        try:
            step()
        except Exception as e:  # noqa: BLE001
            skipped.append(name)
            sys.stderr.write("ngw_contrib.botocore_memo: %s memo not installed (botocore %s): %s\n"
                             % (name, botocore.__version__, e))
    _fill()


def stats():
    """How many lookups each memo answered, and how many entries it holds."""
    return {
        "scan": (_hits["scan"], len(_scan_memo)),
        "alias": (_hits["alias"], len(_alias_memo)),
        "argspec": (_hits["argspec"], len(_argspec_memo)),
    }


install()
