// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title EmitterV2
/// @notice Development and test stand-in for Polymarket's CTF Exchange V2 ("CLOB V2", and its
/// NegRisk twin). It holds no state and moves no assets: `emitMatch` only emits, for one
/// match, the events the real exchange emits, with the real names, parameter types and
/// indexed flags (ctf-exchange v2 `ITrading.sol` / `Events.sol`), in the real order: one
/// `OrderFilled` per maker order, the taker order's `OrderFilled` (taker = this contract),
/// then `OrdersMatched`. `side` is declared `uint8` (the real contract's `Side` enum, which
/// has the same ABI type): 0 = BUY, 1 = SELL.
contract EmitterV2 {
    /// @notice Emitted when an order is filled (one per order in a match).
    event OrderFilled(
        bytes32 indexed orderHash,
        address indexed maker,
        address indexed taker,
        uint8 side,
        uint256 tokenId,
        uint256 makerAmountFilled,
        uint256 takerAmountFilled,
        uint256 fee,
        bytes32 builder,
        bytes32 metadata
    );

    /// @notice Emitted once per match, describing the taker order.
    event OrdersMatched(
        bytes32 indexed takerOrderHash,
        address indexed takerOrderMaker,
        uint8 side,
        uint256 tokenId,
        uint256 makerAmountFilled,
        uint256 takerAmountFilled
    );

    /// @notice One order's fill, as the V2 event states it. BUY: maker amount is collateral,
    /// taker amount is shares; SELL the reverse.
    struct Fill {
        bytes32 orderHash;
        address maker;
        uint8 side;
        uint256 tokenId;
        uint256 makerAmountFilled;
        uint256 takerAmountFilled;
        uint256 fee;
        bytes32 builder;
        bytes32 metadata;
    }

    /// @notice Emits the events of one match. `takerFill.maker` is the aggressor: it is the
    /// `taker` of every maker-order fill and the `maker` of the taker-order fill.
    function emitMatch(Fill calldata takerFill, Fill[] calldata makerFills) external {
        address aggressor = takerFill.maker;
        for (uint256 i = 0; i < makerFills.length; ++i) {
            _emitFill(makerFills[i], aggressor);
        }
        _emitFill(takerFill, address(this));
        emit OrdersMatched(
            takerFill.orderHash,
            aggressor,
            takerFill.side,
            takerFill.tokenId,
            takerFill.makerAmountFilled,
            takerFill.takerAmountFilled
        );
    }

    function _emitFill(Fill calldata f, address taker) private {
        emit OrderFilled(
            f.orderHash,
            f.maker,
            taker,
            f.side,
            f.tokenId,
            f.makerAmountFilled,
            f.takerAmountFilled,
            f.fee,
            f.builder,
            f.metadata
        );
    }
}
