"""An experiment, not a recommendation: a preload that memoises botocore's scan of its
data directories for the whole process, and fills the memo in the zygote.

Every `aws` run builds a new botocore Session, whose Loader lists every service directory
under botocore/data (and ~/.aws/models, AWS_DATA_PATH) to build the command table: about
850 directory opens, 1,700 getdents64 and 3,500 stat calls, some 40 % of main()'s time in
`aws --version`. botocore caches the result per Loader instance only, so a forked child
starts without it. With this module preloaded (`--preload ngbench_awscache` after
awscli's), children reuse the zygote's scan.

Not for production as it is: service models added under ~/.aws/models after the worker
started are not seen until it is recycled (the memo is keyed on the search paths, so a
client's different AWS_DATA_PATH still gets its own scan). benches/plugin-bench serves it
as the bench-only command `aws-memo` to show what the scan costs.
"""

import botocore.loaders
import botocore.session

_original = botocore.loaders.Loader.list_available_services
_memo = {}


def _list_available_services(self, type_name):
    key = (tuple(self.search_paths), type_name)
    if key not in _memo:
        _memo[key] = list(_original(self, type_name))
    return list(_memo[key])


botocore.loaders.Loader.list_available_services = _list_available_services

# Fill the memo here, in the zygote, with the search paths a CLI session uses (awscli,
# preloaded first, has already put its own data directory in AWS_DATA_PATH).
botocore.session.get_session().get_component("data_loader").list_available_services("service-2")
