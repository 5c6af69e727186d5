"""ppl-sbl models, one module per paper.

* :mod:`ppl_sbl.models.rvm`: the variational relevance vector machine (Bishop & Tipping 2000), and
  its multinomial probit form for several classes (Girolami & Rogers 2006).
* :mod:`ppl_sbl.models.grid_rvm`: grid RVMs for table-shaped features (Kropotov et al.).
* :mod:`ppl_sbl.models.robust_rvm`: the robust RVM with Gamma-weighted likelihoods (Hwang & Jeong 2015).
* :mod:`ppl_sbl.models.sequential_sbl`: sequential sparse Bayesian learning (Faul & Pilikos).
* :mod:`ppl_sbl.models.gplvm`: supervised, autoencoder and unsupervised Bayesian GPLVMs (Sauer, ch. 5).
* :mod:`ppl_sbl.models.super_sparse`: super-sparse virtual-prototype machines (Biggio et al.).
"""
