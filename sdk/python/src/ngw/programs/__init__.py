"""Former home of program-specific preloads, now in the ``ngw_contrib`` package (outside
the standard-library-only core). ``ngw.programs.awscli`` is an alias of
``ngw_contrib.awscli``, kept so that existing configurations keep working."""
