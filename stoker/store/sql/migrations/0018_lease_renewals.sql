-- Leases judged without comparing wall clocks (issue 39 item 1). A renewal is a counter, not
-- only a timestamp: an observer (the leader's supervisor, a standby manager, a driver about to
-- take over) times a lease on its own monotonic clock from the moment it saw the counter
-- change, as Chubby, etcd and Kubernetes' leader election do, so a clock step or a skew between
-- hosts neither kills a healthy driver nor hands the leadership over. The holder's own TTL is
-- kept beside it: the observer waits that long. ``expires_at`` stays for display, and for
-- drivers and managers of the previous release, which still renew only it (an observer counts
-- a change of either as a renewal). A resigned leader lease has renewals = -1: free at once.
ALTER TABLE attempts ADD COLUMN renewals BIGINT NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN lease_ttl DOUBLE PRECISION;
ALTER TABLE leader_lease ADD COLUMN renewals BIGINT NOT NULL DEFAULT 0;
ALTER TABLE leader_lease ADD COLUMN ttl DOUBLE PRECISION;
