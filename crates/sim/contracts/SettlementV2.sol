// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title SettlementV2
/// @notice Development and test stand-in for Polymarket's CLOB V2 CTF Exchange that takes the
/// real settlement call (`matchOrders(bytes32 conditionId, Order takerOrder, Order[] makerOrders,
/// uint256 takerFillAmount, uint256[] makerFillAmounts, uint256 takerFeeAmount,
/// uint256[] makerFeeAmounts)`, same argument types, so the same selector) and emits the V2
/// events for it in the real order, each order hashed as V2 hashes it (EIP-712, domain
/// "Polymarket CTF Exchange" version "2", this chain, this contract). It moves no assets and
/// checks no signatures; it keeps what each order has filled (an order filled twice over
/// reverts) and refuses a match whose taker would receive less than its limit price. pmw-sim
/// installs its runtime code at the V2 exchange addresses with `anvil_setCode`.
contract SettlementV2 {
    struct Order {
        uint256 salt;
        address maker;
        address signer;
        uint256 tokenId;
        uint256 makerAmount;
        uint256 takerAmount;
        uint8 side;
        uint8 signatureType;
        uint256 timestamp;
        bytes32 metadata;
        bytes32 builder;
        bytes signature;
    }

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

    event OrdersMatched(
        bytes32 indexed takerOrderHash,
        address indexed takerOrderMaker,
        uint8 side,
        uint256 tokenId,
        uint256 makerAmountFilled,
        uint256 takerAmountFilled
    );

    bytes32 internal constant ORDER_TYPEHASH = keccak256(
        "Order(uint256 salt,address maker,address signer,uint256 tokenId,uint256 makerAmount,uint256 takerAmount,uint8 side,uint8 signatureType,uint256 timestamp,bytes32 metadata,bytes32 builder)"
    );
    bytes32 internal constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");

    /// @notice Maker amount filled so far, per order hash.
    mapping(bytes32 => uint256) public filled;

    function domainSeparator() public view returns (bytes32) {
        return keccak256(
            abi.encode(
                DOMAIN_TYPEHASH, keccak256("Polymarket CTF Exchange"), keccak256("2"), block.chainid, address(this)
            )
        );
    }

    function hashOrder(Order memory order) public view returns (bytes32) {
        bytes32 structHash = keccak256(
            abi.encode(
                ORDER_TYPEHASH,
                order.salt,
                order.maker,
                order.signer,
                order.tokenId,
                order.makerAmount,
                order.takerAmount,
                order.side,
                order.signatureType,
                order.timestamp,
                order.metadata,
                order.builder
            )
        );
        return keccak256(abi.encodePacked("\x19\x01", domainSeparator(), structHash));
    }

    function matchOrders(
        bytes32 conditionId,
        Order memory takerOrder,
        Order[] memory makerOrders,
        uint256 takerFillAmount,
        uint256[] memory makerFillAmounts,
        uint256 takerFeeAmount,
        uint256[] memory makerFeeAmounts
    ) external {
        require(conditionId != bytes32(0), "InvalidCondition");
        require(
            makerOrders.length > 0 && makerOrders.length == makerFillAmounts.length
                && makerOrders.length == makerFeeAmounts.length,
            "MismatchedArrayLengths"
        );
        bytes32 takerHash = hashOrder(takerOrder);
        _take(takerHash, takerOrder, takerFillAmount);
        uint256 received = 0;
        for (uint256 i = 0; i < makerOrders.length; ++i) {
            uint256 taking = _fill(makerOrders[i], makerFillAmounts[i], makerFeeAmounts[i], takerOrder.maker);
            received += _received(takerOrder.side, makerOrders[i].side, makerFillAmounts[i], taking);
        }
        require(received >= _taking(takerOrder, takerFillAmount), "TooLittleTokensReceived");
        _emitTaker(takerHash, takerOrder, takerFillAmount, received, takerFeeAmount);
    }

    /// @dev The taker order's fill (its taker is the exchange), then `OrdersMatched`.
    function _emitTaker(bytes32 takerHash, Order memory takerOrder, uint256 making, uint256 received, uint256 fee)
        internal
    {
        emit OrderFilled(
            takerHash,
            takerOrder.maker,
            address(this),
            takerOrder.side,
            takerOrder.tokenId,
            making,
            received,
            fee,
            takerOrder.builder,
            takerOrder.metadata
        );
        emit OrdersMatched(takerHash, takerOrder.maker, takerOrder.side, takerOrder.tokenId, making, received);
    }

    function _fill(Order memory order, uint256 making, uint256 fee, address counterparty)
        internal
        returns (uint256)
    {
        bytes32 orderHash = hashOrder(order);
        _take(orderHash, order, making);
        uint256 taking = _taking(order, making);
        _emitFill(orderHash, order, counterparty, making, taking, fee);
        return taking;
    }

    function _emitFill(
        bytes32 orderHash,
        Order memory order,
        address counterparty,
        uint256 making,
        uint256 taking,
        uint256 fee
    ) internal {
        emit OrderFilled(
            orderHash, order.maker, counterparty, order.side, order.tokenId, making, taking, fee, order.builder, order.metadata
        );
    }

    /// @dev What the taker receives from one maker's fill. Opposite sides: what the maker gives.
    /// Both BUY (a mint of complementary tokens): one share per pair, the maker's shares. Both
    /// SELL (a merge): one unit of collateral per pair, less what the maker is paid.
    function _received(uint8 takerSide, uint8 makerSide, uint256 making, uint256 taking)
        internal
        pure
        returns (uint256)
    {
        if (takerSide != makerSide) return making;
        if (takerSide == 0) return taking;
        return making - taking;
    }

    function _take(bytes32 orderHash, Order memory order, uint256 making) internal {
        require(making > 0 && order.makerAmount > 0, "ZeroMakerAmount");
        require(order.side <= 1, "InvalidSide");
        uint256 total = filled[orderHash] + making;
        require(total <= order.makerAmount, "MakingGtRemaining");
        filled[orderHash] = total;
    }

    function _taking(Order memory order, uint256 making) internal pure returns (uint256) {
        return making * order.takerAmount / order.makerAmount;
    }
}
