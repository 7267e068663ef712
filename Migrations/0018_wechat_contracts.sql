-- 0018: WeChat contract states as a projection (LedgerStore/WeChat/WeChatContractProjection.swift),
-- read by GET /v1/wechat/contracts and the sign-params check instead of folding a customer's
-- facts on every request. Kept like every projection: live in the append transaction, caught up
-- by the worker from its checkpoint `wechat_contracts` (which starts at 0 here and is filled by
-- the worker; until it reaches the facts, reads fold as before), rebuilt by
-- `ledger rebuild --projection wechat_contracts`.
SET LOCAL ROLE ledger_projector;

-- Every (openid, product, subscription) a WeChat renewal statement names: the candidates of a
-- contract (WeChatContractState.party). Only ever added to, like the facts it comes from.
CREATE TABLE projections.wechat_contract_parties (
    open_id      text NOT NULL,
    product_id   text NOT NULL,
    subscription text NOT NULL,
    PRIMARY KEY (open_id, product_id, subscription)
);
CREATE INDEX wechat_contract_parties_subscription ON projections.wechat_contract_parties (subscription);

-- One row per contract: WeChatContractState.of the candidates' facts, as JSON (`body`, sorted
-- keys). No row: UNBINDUSER.
CREATE TABLE projections.wechat_contracts (
    open_id                 text NOT NULL,
    product_id              text NOT NULL,
    original_transaction_id text NOT NULL,
    authorization_state     text NOT NULL,
    body                    text NOT NULL,
    PRIMARY KEY (open_id, product_id)
);

RESET ROLE;

INSERT INTO projection_checkpoints (projection, position, status) VALUES ('wechat_contracts', 0, 'running')
ON CONFLICT (projection) DO NOTHING;
