"""Conditional GANs shared by the defenses and attacks that need a generator (Anti-GAN's defender
CGAN, the GAN attack of Hitaj et al., generative priors): DCGAN-style networks sized for small images
(:mod:`.networks`) and a resumable trainer whose checkpoints are fitted artifacts (:mod:`.training`).
Nothing here knows about a particular defense or attack."""

from leakshield.generative.networks import ConditionalDiscriminator, ConditionalGenerator
from leakshield.generative.training import GANSchedule, GANState, train_cgan

__all__ = ["ConditionalDiscriminator", "ConditionalGenerator", "GANSchedule", "GANState", "train_cgan"]
