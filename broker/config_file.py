"""Reading ``broker.conf`` (Java properties, RocketMQ's key names) line by line, and the keys of
RocketMQ's broker settings this node accepts without using.

Kept apart from :mod:`broker.config` so the settings table there stays one list: a key added to
``_PROPERTIES`` is known everywhere (strict checking, suggestions) with no other change.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from contracts.errors import ConfigError

# RocketMQ broker settings (BrokerConfig, MessageStoreConfig, Netty*Config) that real broker.conf
# files carry and this node accepts without using: kept in ``BrokerConfig.extra``, never an
# error. Anything neither here nor in broker.config's table is an unknown key.
ROCKETMQ_IGNORED_KEYS = frozenset(
    """
    rocketmqHome brokerIP2 brokerPermission clusterTopicEnable brokerTopicEnable
    autoCreateSubscriptionGroup messageStorePlugIn msgTraceTopicName traceTopicEnable
    sendMessageThreadPoolNums putMessageFutureThreadPoolNums pullMessageThreadPoolNums
    processReplyMessageThreadPoolNums queryMessageThreadPoolNums adminBrokerThreadPoolNums
    clientManageThreadPoolNums consumerManageThreadPoolNums heartbeatThreadPoolNums
    endTransactionThreadPoolNums flushConsumerOffsetHistoryInterval rejectTransactionMessage
    fetchNamesrvAddrByAddressServer sendThreadPoolQueueCapacity pullThreadPoolQueueCapacity
    replyThreadPoolQueueCapacity queryThreadPoolQueueCapacity
    clientManagerThreadPoolQueueCapacity consumerManagerThreadPoolQueueCapacity
    heartbeatThreadPoolQueueCapacity endTransactionPoolQueueCapacity filterServerNums
    longPollingEnable shortPollingTimeMills notifyConsumerIdsChangedEnable highSpeedMode
    commercialEnable commercialTimerCount commercialTransCount commercialBigCount
    commercialBaseCount transferMsgByHeap maxDelayTime regionId registerBrokerTimeoutMills
    disableConsumeIfConsumerReadSlowly consumerFallbehindThreshold brokerFastFailureEnable
    waitTimeMillsInSendQueue waitTimeMillsInPullQueue waitTimeMillsInHeartbeatQueue
    waitTimeMillsInTransactionQueue startAcceptSendRequestTimeStamp traceOn
    enableCalcFilterBitMap expectConsumerNumUseFilter maxErrorRateOfBloomFilter
    filterDataCleanTimeSpan filterSupportRetry enablePropertyFilter compressedRegister
    forceRegister registerNameServerPeriod transactionTimeOut transactionCheckMax
    transactionCheckInterval aclEnable storeReplyMessageEnable autoDeleteUnusedStats
    enableDetailStat isolateLogEnable enableSlaveActingMaster
    storePathDLedgerCommitLog storePathEpochFile
    enableConsumeQueueExt mappedFileSizeConsumeQueueExt bitMapLengthConsumeQueueExt
    cleanResourceInterval deleteCommitLogFilesInterval deleteConsumeQueueFilesInterval
    destroyMapedFileIntervalForcibly redeleteHangedFileInterval deleteWhen
    diskMaxUsedSpaceRatio fileReservedTime putMsgIndexHightWater commitCommitLogLeastPages
    flushLeastPagesWhenWarmMapedFile flushConsumeQueueLeastPages
    commitCommitLogThoroughInterval flushConsumeQueueThoroughInterval
    maxTransferBytesOnMessageInMemory maxTransferCountOnMessageInMemory
    maxTransferBytesOnMessageInDisk maxTransferCountOnMessageInDisk messageIndexEnable
    maxHashSlotNum maxIndexNum maxMsgsNumBatch messageIndexSafe flushDelayOffsetInterval
    cleanFileForciblyEnable warmMapedFileEnable offsetCheckInSlave debugLockEnable
    duplicationEnable diskFallRecorded osPageCacheBusyTimeOutMills defaultQueryMaxNum
    transientStorePoolEnable transientStorePoolSize fastFailIfNoBufferInStorePool
    enableDLegerCommitLog dLegerGroup dLegerPeers dLegerSelfId preferredLeaderId
    isEnableBatchPush enableScheduleMessageStats enableLmq enableMultiDispatch
    maxLmqConsumeQueueNum enableScheduleAsyncDeliver scheduleAsyncDeliverMaxPendingLimit
    scheduleAsyncDeliverMaxResendNum3Times storeType autoMessageVersionOnTopicLen
    enableMixedMessageType timerWheelEnable useReentrantLockWhenPutMessage
    serverWorkerThreads serverCallbackExecutorThreads serverSelectorThreads
    serverOnewaySemaphoreValue serverAsyncSemaphoreValue serverChannelMaxIdleTimeSeconds
    serverSocketSndBufSize serverSocketRcvBufSize serverPooledByteBufAllocatorEnable
    useEpollNativeSelector serverWriteBufferHighWaterMark serverWriteBufferLowWaterMark
    clientWorkerThreads clientCallbackExecutorThreads clientOnewaySemaphoreValue
    clientAsyncSemaphoreValue connectTimeoutMillis channelNotActiveInterval
    clientChannelMaxIdleTimeSeconds clientSocketSndBufSize clientSocketRcvBufSize
    clientPooledByteBufAllocatorEnable clientCloseSocketIfTimeout useTLS
    """.split()
)


@dataclass(frozen=True, slots=True)
class ConfLine:
    """One ``key=value`` line of a properties file."""

    key: str
    value: str
    lineno: int


def parse_properties(text: str, path: str) -> list[ConfLine]:
    """The ``key=value`` (or ``key: value``) lines of ``text``; comments (#, !) and blank lines
    skipped. A line that is not a setting, or a key given twice, is an error naming the line."""
    out: list[ConfLine] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {stripped!r}")
        key, value = stripped[:sep].strip(), stripped[sep + 1 :].strip()
        if key in seen:
            raise ConfigError(
                f"{path}:{lineno}: {key} is set again (first set on line {seen[key]}); "
                "set each key once"
            )
        seen[key] = lineno
        out.append(ConfLine(key, value, lineno))
    return out


def closest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key ``key`` most likely meant: same letters in another case first, then the
    nearest spelling (``flushDiskTyp`` -> ``flushDiskType``); None when nothing is close."""
    known = list(known)
    for k in known:
        if k.lower() == key.lower():
            return k
    by_lower = {k.lower(): k for k in known}
    near = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[near[0]] if near else None


def unknown_key_message(key: str, known: Iterable[str]) -> str:
    hint = closest_key(key, known)
    did_you_mean = f"; did you mean {hint}?" if hint else ""
    return (
        f"unknown key {key!r}{did_you_mean} (strictConfig=false ignores unknown keys with a "
        "warning)"
    )
