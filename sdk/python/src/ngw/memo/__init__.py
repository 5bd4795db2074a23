"""Other names of the memo modules, which live in the ``ngw_contrib`` package (outside
the standard-library-only core): ``ngw.memo.botocore`` is an alias of
``ngw_contrib.botocore_memo``, for configurations that name it so."""
