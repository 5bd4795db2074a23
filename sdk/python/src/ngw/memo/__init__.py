"""Former home of the memo modules, now in the ``ngw_contrib`` package (outside the
standard-library-only core). ``ngw.memo.botocore`` is an alias of
``ngw_contrib.botocore_memo``, kept so that existing configurations keep working."""
