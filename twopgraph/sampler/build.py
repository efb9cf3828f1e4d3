"""Samplers built by name from :data:`~twopgraph.core.protocols.SAMPLERS`
(:func:`make_sampler`), with the options each declares (:func:`sampler_options`)."""

from __future__ import annotations

from twopgraph.core.protocols import SAMPLERS


def sampler_options(name: str, section) -> dict:
    """The keywords sampler ``name`` takes from a sampling config ``section``
    (:class:`~twopgraph.config.SamplingConfig`): each field its factory declares in its
    ``options`` attribute, named ``<sampler>_<keyword>`` (``labor_iterations`` ->
    ``iterations``); ``{}`` for a sampler that declares none."""
    fields = getattr(SAMPLERS.get(name), "options", ())
    return {f.split("_", 1)[1]: getattr(section, f) for f in fields}


def make_sampler(name: str, graph, fanouts, seed: int = 0, degrees=None, **options):
    """Build the sampler registered as ``name`` (``"neighbor"``: numba, host memory;
    ``"device"``: torch ops on ``device=``) over ``graph``; ``degrees`` overrides the degrees
    blocks carry (GCN's normalisation); ``options`` go to the sampler's factory."""
    return SAMPLERS.get(name)(graph, fanouts, seed=seed, degrees=degrees, **options)

