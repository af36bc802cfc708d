"""choir: collective communication for CPU clusters.

The Python side of choir is small: ``choir.torch`` registers choir as a
torch.distributed backend. Import it explicitly (``import choir.torch``); this
package itself imports nothing heavy.
"""
