"""Alias of ``ngw_contrib.botocore_memo`` (the module moved out of the core package)."""

import sys

import ngw_contrib.botocore_memo

sys.modules[__name__] = ngw_contrib.botocore_memo
