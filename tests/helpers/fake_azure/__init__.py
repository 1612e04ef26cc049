"""Local stand-ins for the Azure REST services the Batch AI launcher calls
(Batch AI has been retired and Azurite has no File service): test fixtures,
not part of the cifar_dist package. Importable as ``fake_azure`` with tests/
on sys.path (pytest's default rootdir-relative import does that)."""
