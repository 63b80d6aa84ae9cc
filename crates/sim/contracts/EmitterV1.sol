// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title EmitterV1
/// @notice Development and test stand-in for Polymarket's CTF Exchange V1 (and its NegRisk
/// twin). It holds no state and moves no assets: `emitMatch` only emits, for one match, the
/// events the real exchange emits, with the real names, parameter types and indexed flags
/// (Polymarket/ctf-exchange `src/exchange/interfaces/ITrading.sol`), in the real order: one
/// `OrderFilled` per maker order, the taker order's `OrderFilled` (taker = this contract),
/// then `OrdersMatched`. pmw-sim installs its runtime code at the exchange addresses of a
/// local chain with `anvil_setCode`.
contract EmitterV1 {
    /// @notice Emitted when an order is filled (one per order in a match).
    event OrderFilled(
        bytes32 indexed orderHash,
        address indexed maker,
        address indexed taker,
        uint256 makerAssetId,
        uint256 takerAssetId,
        uint256 makerAmountFilled,
        uint256 takerAmountFilled,
        uint256 fee
    );

    /// @notice Emitted once per match, describing the taker order.
    event OrdersMatched(
        bytes32 indexed takerOrderHash,
        address indexed takerOrderMaker,
        uint256 makerAssetId,
        uint256 takerAssetId,
        uint256 makerAmountFilled,
        uint256 takerAmountFilled
    );

    /// @notice One order's fill, as the V1 event states it. `makerAssetId == 0` means the
    /// order's maker BUYs `takerAssetId` (paying collateral); otherwise it SELLs `makerAssetId`.
    struct Fill {
        bytes32 orderHash;
        address maker;
        uint256 makerAssetId;
        uint256 takerAssetId;
        uint256 makerAmountFilled;
        uint256 takerAmountFilled;
        uint256 fee;
    }

    /// @notice Emits the events of one match. `takerFill.maker` is the aggressor: it is the
    /// `taker` of every maker-order fill and the `maker` of the taker-order fill.
    function emitMatch(Fill calldata takerFill, Fill[] calldata makerFills) external {
        address aggressor = takerFill.maker;
        for (uint256 i = 0; i < makerFills.length; ++i) {
            Fill calldata f = makerFills[i];
            emit OrderFilled(
                f.orderHash,
                f.maker,
                aggressor,
                f.makerAssetId,
                f.takerAssetId,
                f.makerAmountFilled,
                f.takerAmountFilled,
                f.fee
            );
        }
        emit OrderFilled(
            takerFill.orderHash,
            aggressor,
            address(this),
            takerFill.makerAssetId,
            takerFill.takerAssetId,
            takerFill.makerAmountFilled,
            takerFill.takerAmountFilled,
            takerFill.fee
        );
        emit OrdersMatched(
            takerFill.orderHash,
            aggressor,
            takerFill.makerAssetId,
            takerFill.takerAssetId,
            takerFill.makerAmountFilled,
            takerFill.takerAmountFilled
        );
    }
}
