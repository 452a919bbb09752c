"""The scripts' shared start-up (bert_jax.cli): where compiled programs are kept."""

import jax

from bert_jax import cli


def _cache_settings():
    return jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache


def _restore(settings):
    jax.config.update("jax_compilation_cache_dir", settings[0])
    jax.config.update("jax_enable_compilation_cache", settings[1])


def test_scripts_keep_compiled_programs_in_the_user_cache_unless_told_otherwise(
        tmp_path, monkeypatch):
    before = _cache_settings()
    try:
        monkeypatch.delenv(cli.COMPILATION_CACHE_VARIABLE, raising=False)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        cli.use_compilation_cache()
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "bert_jax" / "xla")

        # a cache folder that cannot be made: the run goes on without the cache
        jax.config.update("jax_compilation_cache_dir", None)
        (tmp_path / "a_file").write_text("")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a_file"))
        cli.use_compilation_cache()
        assert jax.config.jax_compilation_cache_dir is None

        # the variable, even empty (no cache), is JAX's to read: the scripts leave it alone
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv(cli.COMPILATION_CACHE_VARIABLE, "")
        cli.use_compilation_cache()
        assert jax.config.jax_compilation_cache_dir is None

        # a script that measures compilation turns the cache off whatever the environment says
        monkeypatch.setenv(cli.COMPILATION_CACHE_VARIABLE, str(tmp_path / "elsewhere"))
        cli.use_compilation_cache(enabled=False)
        assert jax.config.jax_enable_compilation_cache is False
    finally:
        _restore(before)
