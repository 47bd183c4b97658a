"""Attacks by a participating client: the GAN attack of Hitaj et al., a client that trains a generator
against the global model it receives every round."""

from leakshield.attacks.participant.hitaj import FakeClassHead, HitajAttacker, HitajGAN, with_fake_class

__all__ = ["FakeClassHead", "HitajAttacker", "HitajGAN", "with_fake_class"]
