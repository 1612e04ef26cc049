"""Configuration and the command line: what an option is, every option's schema, and the checks a
command gets before anything runs. It re-exports nothing: import the module that holds the name.

- ``options.py``: ``@config_option(group, name)``, the mark that makes a dataclass an option;
- ``schema.py``: the options of model, optimizer, trainer, engine, task, tracking, and ``Config``
  (the schema of conf/config.yaml); ``data_options.py``: the options of ``data``;
- ``plugin_names.py``: the classes Hydra instantiates for cifar_dist's plugins;
- ``files.py``: where the YAML config files are (``conf/local/``) and their syntax in one line;
- ``override_syntax.py``: reading and writing ``key=value`` overrides (quoting, re-run hints);
- ``override_check.py``: a command line's overrides checked before Hydra composes;
- ``option_listing.py``: ``--help``'s list of options;
- ``validation.py``: a composed config's values checked in one line each.

Every option is stored in Hydra's ConfigStore by ``cifar_dist/all_options.py`` (it imports every
launcher too, so it stands above this package, with the app).
"""
