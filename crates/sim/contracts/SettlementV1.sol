// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title SettlementV1
/// @notice Development and test stand-in for Polymarket's CTF Exchange V1 that takes the real
/// settlement calls (Polymarket/ctf-exchange `CTFExchange.sol`: `fillOrder`, `fillOrders`,
/// `matchOrders`, same argument types, so the same selectors) and emits the events the real
/// exchange emits for them, in the real order. Orders are hashed as the real exchange hashes
/// them (EIP-712, domain "Polymarket CTF Exchange" version "1", this chain, this contract), so
/// the `orderHash` of every log is the one the calldata implies. It moves no assets and checks
/// no signatures; it keeps what each order has filled, so an order filled twice over reverts as
/// on the real exchange, as does a match whose taker would receive less than its limit price.
/// pmw-sim installs its runtime code at the V1 exchange addresses with `anvil_setCode`.
contract SettlementV1 {
    struct Order {
        uint256 salt;
        address maker;
        address signer;
        address taker;
        uint256 tokenId;
        uint256 makerAmount;
        uint256 takerAmount;
        uint256 expiration;
        uint256 nonce;
        uint256 feeRateBps;
        uint8 side;
        uint8 signatureType;
        bytes signature;
    }

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

    event OrdersMatched(
        bytes32 indexed takerOrderHash,
        address indexed takerOrderMaker,
        uint256 makerAssetId,
        uint256 takerAssetId,
        uint256 makerAmountFilled,
        uint256 takerAmountFilled
    );

    bytes32 internal constant ORDER_TYPEHASH = keccak256(
        "Order(uint256 salt,address maker,address signer,address taker,uint256 tokenId,uint256 makerAmount,uint256 takerAmount,uint256 expiration,uint256 nonce,uint256 feeRateBps,uint8 side,uint8 signatureType)"
    );
    bytes32 internal constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");

    /// @notice Maker amount filled so far, per order hash.
    mapping(bytes32 => uint256) public filled;

    function domainSeparator() public view returns (bytes32) {
        return keccak256(
            abi.encode(
                DOMAIN_TYPEHASH, keccak256("Polymarket CTF Exchange"), keccak256("1"), block.chainid, address(this)
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
                order.taker,
                order.tokenId,
                order.makerAmount,
                order.takerAmount,
                order.expiration,
                order.nonce,
                order.feeRateBps,
                order.side,
                order.signatureType
            )
        );
        return keccak256(abi.encodePacked("\x19\x01", domainSeparator(), structHash));
    }

    function fillOrder(Order memory order, uint256 fillAmount) external {
        _fill(order, fillAmount, msg.sender);
    }

    function fillOrders(Order[] memory orders, uint256[] memory fillAmounts) external {
        require(orders.length == fillAmounts.length, "MismatchedArrayLengths");
        for (uint256 i = 0; i < orders.length; ++i) {
            _fill(orders[i], fillAmounts[i], msg.sender);
        }
    }

    function matchOrders(
        Order memory takerOrder,
        Order[] memory makerOrders,
        uint256 takerFillAmount,
        uint256[] memory makerFillAmounts
    ) external {
        require(makerOrders.length > 0 && makerOrders.length == makerFillAmounts.length, "MismatchedArrayLengths");
        bytes32 takerHash = hashOrder(takerOrder);
        _take(takerHash, takerOrder, takerFillAmount);
        uint256 received = 0;
        for (uint256 i = 0; i < makerOrders.length; ++i) {
            uint256 taking = _fill(makerOrders[i], makerFillAmounts[i], takerOrder.maker);
            received += _received(takerOrder.side, makerOrders[i].side, makerFillAmounts[i], taking);
        }
        require(received >= _taking(takerOrder, takerFillAmount), "TooLittleTokensReceived");
        _emitTaker(takerHash, takerOrder, takerFillAmount, received);
    }

    /// @dev The taker order's fill (its taker is the exchange), then `OrdersMatched`.
    function _emitTaker(bytes32 takerHash, Order memory takerOrder, uint256 making, uint256 received) internal {
        (uint256 makerAssetId, uint256 takerAssetId) = _assets(takerOrder);
        uint256 fee = _fee(takerOrder, received);
        emit OrderFilled(
            takerHash, takerOrder.maker, address(this), makerAssetId, takerAssetId, making, received, fee
        );
        emit OrdersMatched(takerHash, takerOrder.maker, makerAssetId, takerAssetId, making, received);
    }

    /// @dev Fills `making` of `order` against `counterparty`; returns what the order receives.
    function _fill(Order memory order, uint256 making, address counterparty) internal returns (uint256) {
        bytes32 orderHash = hashOrder(order);
        _take(orderHash, order, making);
        uint256 taking = _taking(order, making);
        _emitFill(orderHash, order, counterparty, making, taking);
        return taking;
    }

    function _emitFill(bytes32 orderHash, Order memory order, address counterparty, uint256 making, uint256 taking)
        internal
    {
        (uint256 makerAssetId, uint256 takerAssetId) = _assets(order);
        uint256 fee = _fee(order, taking);
        emit OrderFilled(orderHash, order.maker, counterparty, makerAssetId, takerAssetId, making, taking, fee);
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
        require(order.expiration == 0 || order.expiration >= block.timestamp, "OrderExpired");
        uint256 total = filled[orderHash] + making;
        require(total <= order.makerAmount, "MakingGtRemaining");
        filled[orderHash] = total;
    }

    /// @dev CalculatorHelper.calculateTakingAmount.
    function _taking(Order memory order, uint256 making) internal pure returns (uint256) {
        return making * order.takerAmount / order.makerAmount;
    }

    /// @dev BUY (0) pays collateral (asset id 0) for `tokenId`; SELL gives `tokenId`.
    function _assets(Order memory order) internal pure returns (uint256, uint256) {
        if (order.side == 0) return (0, order.tokenId);
        return (order.tokenId, 0);
    }

    /// @dev A stand-in for the exchange's fee: the fee rate on what the order receives.
    function _fee(Order memory order, uint256 taking) internal pure returns (uint256) {
        return taking * order.feeRateBps / 10_000;
    }
}

/// @title FeeModuleV1
/// @notice Stand-in for Polymarket's V1 fee module (Polymarket/exchange-fee-module
/// `IFeeModule.sol`): the real seven-argument `matchOrders`, proxied to the exchange whose
/// address is in storage slot 0 (pmw-sim sets it with `anvil_setStorageAt`). Fee refunds are
/// not modelled: the exchange's logs are the fills.
contract FeeModuleV1 {
    SettlementV1 public exchange;

    function matchOrders(
        SettlementV1.Order memory takerOrder,
        SettlementV1.Order[] memory makerOrders,
        uint256 takerFillAmount,
        uint256 takerReceiveAmount,
        uint256[] memory makerFillAmounts,
        uint256 takerFeeAmount,
        uint256[] memory makerFeeAmounts
    ) external {
        require(makerFeeAmounts.length == makerOrders.length, "MismatchedArrayLengths");
        require(takerReceiveAmount > 0 || takerFeeAmount == 0, "NoProceeds");
        exchange.matchOrders(takerOrder, makerOrders, takerFillAmount, makerFillAmounts);
    }
}
