"""Bessel-function helpers against mpmath, closed forms and quadrature on S²."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from geometry_reference import (
    mp_log_vmf_normalizer,
    sphere_quadrature_s2,
    unit_rows,
)
from scipy.special import i0

from chexretrieve.geometry.bessel import (
    bessel_ratio,
    log_bessel_i_reduced,
    log_vmf_normalizer,
    uniform_sphere_cgf,
    vmf_mean_length,
)

ORDERS = [-0.5, 0.0, 0.5, 1.5, 63.0, 127.0, 255.0, 255.5, 1023.0]
ARGUMENTS = [0.0, 1e-8, 1e-3, 0.5, 5.0, 12.0, 30.0, 100.0, 255.0, 1e3, 1e4, 1e5]


@pytest.mark.parametrize("nu", ORDERS)
def test_reduced_log_bessel_matches_mpmath(nu):
    values = log_bessel_i_reduced(nu, np.array(ARGUMENTS))
    for x, value in zip(ARGUMENTS, values, strict=True):
        with mpmath.workdps(40):
            if x == 0:
                expected = -mpmath.loggamma(nu + 1)
            else:
                expected = mpmath.log(mpmath.besseli(nu, x)) - nu * mpmath.log(mpmath.mpf(x) / 2)
        assert abs(value - float(expected)) <= 1e-13 * max(1.0, abs(float(expected)))


@pytest.mark.parametrize("nu", ORDERS)
def test_bessel_ratio_matches_mpmath(nu):
    ratios = bessel_ratio(nu, np.array(ARGUMENTS))
    assert ratios[0] == 0.0
    for x, ratio in zip(ARGUMENTS[1:], ratios[1:], strict=True):
        with mpmath.workdps(40):
            expected = float(mpmath.besseli(nu + 1, x) / mpmath.besseli(nu, x))
        assert abs(ratio - expected) <= 1e-12 * expected
        assert 0.0 < ratio <= 1.0


def test_vmf_normalizer_matches_closed_form_in_three_dimensions():
    kappa = np.array([0.0, 1e-6, 0.3, 2.0, 40.0, 700.0, 1e5])
    # on S², C_3(κ) = κ / (4π sinh κ), written via log(sinh κ) = κ + log1p(-e^{-2κ}) − log 2
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.where(
            kappa > 0,
            np.log(kappa) - np.log(4 * np.pi) - (kappa + np.log1p(-np.exp(-2 * kappa)) - np.log(2)),
            -np.log(4 * np.pi),
        )
    np.testing.assert_allclose(log_vmf_normalizer(3, kappa), expected, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("dim", [2, 5, 512])
def test_vmf_normalizer_matches_mpmath(dim):
    kappa = np.array([0.0, 0.5, 10.0, 100.0, 1e4, 1e5])
    values = log_vmf_normalizer(dim, kappa)
    for k, value in zip(kappa, values, strict=True):
        expected = float(mp_log_vmf_normalizer(dim, k))
        assert abs(value - expected) <= 1e-12 * max(1.0, abs(expected))


def test_vmf_density_integrates_to_one_on_s2():
    mu = np.array([0.0, 0.6, 0.8])
    for kappa in (0.0, 3.0, 50.0):
        log_c = log_vmf_normalizer(3, np.array([kappa]))[0]
        mass = sphere_quadrature_s2(lambda g, k=kappa, c=log_c: np.exp(c + k * g @ mu))
        assert mass == pytest.approx(1.0, rel=1e-9)


def test_vmf_mean_length_is_expected_cosine_on_s2():
    mu = np.array([1.0, 0.0, 0.0])
    kappa = 7.5
    log_c = log_vmf_normalizer(3, np.array([kappa]))[0]
    mean_cos = sphere_quadrature_s2(lambda g: (g @ mu) * np.exp(log_c + kappa * g @ mu))
    assert vmf_mean_length(3, np.array([kappa]))[0] == pytest.approx(mean_cos, rel=1e-9)


def test_uniform_sphere_cgf_matches_integrals():
    rng = np.random.default_rng(0)
    eta = 4.0 * unit_rows(rng, 3, 3)
    cgf, grad = uniform_sphere_cgf(eta)
    for row, value, gradient in zip(eta, cgf, grad, strict=True):
        mean_exp = sphere_quadrature_s2(lambda g, e=row: np.exp(g @ e)) / (4 * np.pi)
        assert value == pytest.approx(np.log(mean_exp), rel=1e-10)
        for axis in range(3):
            moment = sphere_quadrature_s2(lambda g, e=row, a=axis: g[:, a] * np.exp(g @ e))
            assert gradient[axis] == pytest.approx(moment / (4 * np.pi) / mean_exp, abs=1e-10)
    # circle: E[exp(ηᵀγ)] = I_0(‖η‖)
    circle = 2.5 * unit_rows(rng, 2, 2)
    np.testing.assert_allclose(uniform_sphere_cgf(circle)[0], np.log(i0(2.5)), rtol=1e-12)


def test_uniform_sphere_cgf_at_origin_is_zero_with_zero_gradient():
    cgf, grad = uniform_sphere_cgf(np.zeros((1, 512)))
    assert cgf[0] == pytest.approx(0.0, abs=1e-12)
    assert not grad.any()


def test_large_arguments_stay_finite_in_high_dimension():
    x = np.array([1e-300, 1e-5, 100.0, 1e5, 1e7])
    for fn in (log_bessel_i_reduced, bessel_ratio):
        assert np.isfinite(fn(255.0, x)).all()
    assert np.isfinite(log_vmf_normalizer(512, x)).all()


def test_negative_argument_is_refused():
    with pytest.raises(ValueError, match="finite and >= 0"):
        log_bessel_i_reduced(1.0, np.array([-1.0]))
