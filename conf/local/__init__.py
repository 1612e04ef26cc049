"""Your own config options, git-ignored: conf/local/<group>/<name>.yaml is found as ``group=name``
(conf/config.yaml puts pkg://cifar_dist.conf.local on Hydra's search path; this file makes it a package)."""
