"""ppl-sbl models, one module per paper (installed as ``ppl_sbl.models``).

* :mod:`ppl_sbl.models.rvm`: the variational relevance vector machine (Bishop & Tipping 2000).
* :mod:`ppl_sbl.models.grid_rvm`: grid RVMs for table-shaped features (Kropotov et al.).
* :mod:`ppl_sbl.models.robust_rvm`: the robust RVM with Gamma-weighted likelihoods (Hwang & Jeong 2015).
"""
