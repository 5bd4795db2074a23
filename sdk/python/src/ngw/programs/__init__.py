"""Other names of the program-specific preloads, which live in the ``ngw_contrib`` package
(outside the standard-library-only core): ``ngw.programs.awscli`` is an alias of
``ngw_contrib.awscli``, for configurations that name it so."""
