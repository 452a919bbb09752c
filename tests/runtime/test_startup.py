"""The scripts' shared start-up: where compiled programs are kept
(bert_jax.runtime.compilation_cache) and which of Orbax's log records show
(bert_jax.runtime.orbax_logs)."""

import jax

from bert_jax.runtime import compilation_cache, orbax_logs


def _cache_settings():
    return (jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache,
            jax.config.jax_persistent_cache_min_compile_time_secs,
            jax.config.jax_compilation_cache_max_size)


def _restore(settings):
    jax.config.update("jax_compilation_cache_dir", settings[0])
    jax.config.update("jax_enable_compilation_cache", settings[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", settings[2])
    jax.config.update("jax_compilation_cache_max_size", settings[3])


def test_scripts_keep_compiled_programs_in_the_user_cache_unless_told_otherwise(
        tmp_path, monkeypatch):
    before = _cache_settings()
    try:
        monkeypatch.delenv(compilation_cache.COMPILATION_CACHE_VARIABLE, raising=False)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
        compilation_cache.use_compilation_cache()
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "bert_jax" / "xla")
        # programs of half a second (embed.py's, predict.py's) are kept
        assert (jax.config.jax_persistent_cache_min_compile_time_secs
                == compilation_cache.CACHE_MIN_COMPILE_SECONDS < 0.5)

        # the user's own thresholds are JAX's to read
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 7.0)
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "7")
        compilation_cache.use_compilation_cache()
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 7.0

        # a cache folder that cannot be made: the run goes on without the cache
        jax.config.update("jax_compilation_cache_dir", None)
        (tmp_path / "a_file").write_text("")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a_file"))
        compilation_cache.use_compilation_cache()
        assert jax.config.jax_compilation_cache_dir is None

        # the variable, even empty (no cache), is JAX's to read: the scripts leave it alone
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv(compilation_cache.COMPILATION_CACHE_VARIABLE, "")
        compilation_cache.use_compilation_cache()
        assert jax.config.jax_compilation_cache_dir is None

        # a script that measures compilation turns the cache off whatever the environment says
        monkeypatch.setenv(compilation_cache.COMPILATION_CACHE_VARIABLE,
                           str(tmp_path / "elsewhere"))
        compilation_cache.use_compilation_cache(enabled=False)
        assert jax.config.jax_enable_compilation_cache is False
    finally:
        _restore(before)


def test_orbax_noise_is_dropped_and_its_other_warnings_kept():
    import logging as std_logging

    def record(path, level, message):
        return std_logging.LogRecord("absl", level, path, 1, message, None, None)

    orbax = "/site-packages/orbax/checkpoint/checkpoint_manager.py"
    keep = orbax_logs._DropOrbaxChatter().filter
    for noise in ("CheckpointManagerOptions.read_only=True, setting create=False.",
                  "Given directory is read only=/tmp/run/checkpoints",
                  'Item "checksums" was found in the checkpoint, but could not be restored. '
                  "Please provide a `CheckpointHandlerRegistry`"):
        assert not keep(record(orbax, std_logging.WARNING, noise))
    assert not keep(record(orbax, std_logging.INFO, "Saving checkpoint at step 3"))
    assert keep(record(orbax, std_logging.WARNING, 'Item "state" was found in the checkpoint, '
                                                   "but could not be restored"))
    assert keep(record("/work/bert_jax/train/loop.py", std_logging.INFO, "step 3"))
    assert keep(record("/work/bert_jax/train/loop.py", std_logging.WARNING,
                       "Given directory is read only="))
