"""Alias of ``ngw_contrib.awscli`` (the module moved out of the core package)."""

import sys

import ngw_contrib.awscli

sys.modules[__name__] = ngw_contrib.awscli
