"""Process and device plumbing, below everything else in bert_jax: the platform a program is
traced for (platform.py), jax.distributed start-up (distributed.py), agreeing across processes
(multiprocess.py), the compilation cache (compilation_cache.py), XLA options of the big programs
(xla_options.py), Orbax's log records (orbax_logs.py), progress bars (progress.py), local and
gs:// paths (paths.py), parameter paths (pytree.py), and the device mesh with its logical-axis
rules (sharding.py).

Import the submodules directly (`from bert_jax.runtime import sharding`); this package imports
none of them.
"""
