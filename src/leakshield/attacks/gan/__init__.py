"""GAN-based attacks: the participant attack of Hitaj et al."""

from leakshield.attacks.gan.hitaj import FakeClassHead, HitajAttacker, HitajGAN, with_fake_class

__all__ = ["FakeClassHead", "HitajAttacker", "HitajGAN", "with_fake_class"]
